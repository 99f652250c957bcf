# A fourteenth held-out set of variable-shape workloads for the allocation policy (issue 27),
# to be recorded with ../shared/gpu/record_trace.py's machinery by record6.sh
# (SCRIPT=workloads14.py) into a folder outside the repository:
#   held out 14: inception_v3_varres_infer, alexnet_varres_train, squeezebert_varlen_infer,
#                canine_varlen_infer, rembert_mlm_varlen_train, starcoder2_generate_varprompt,
#                biogpt_generate_varbatch
# None of these architectures is in workloads.py or workloads6.py to workloads13.py. They were
# written on 2026-12-06 (about 11:00 UTC), when the fourteenth round had kept no candidate and
# the session's device time was spent: they wait for the next round, which fixes its
# candidate and the test that judges it (in README.md) before recording them, and records
# them before reading any of their figures. Not run before commit (no PyTorch on the build
# machine): a check run first (W14_MAX_STEPS=1, its figures not read) finds API mistakes.
# Every model is built from a config with random weights (no pretrained weights, no network);
# every run is seeded with seeded_cuda(). Step counts keep each history well under the
# recorder's 5,000,000 entries. W14_MAX_STEPS=N (a check run only, never a recording) caps
# every loop.
import os, random, sys, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from workload_steps import (generate_fixed, infer_random_images, infer_random_tokens,
                            optimizer_step, record_main, seeded_cuda, step_limits)

steps, capped = step_limits("W14_MAX_STEPS")

def run(name):
    dev = seeded_cuda()
    if name == "inception_v3_varres_infer":
        # Inception v3 (torchvision, no auxiliary head), fp32, no grad; 30 batches of random
        # batch 1-64 at 160-512 x 160-512 (steps of 32, square).
        import torchvision
        m = torchvision.models.inception_v3(weights=None, aux_logits=False,
                                            init_weights=False).to(dev).eval()
        infer_random_images(m, dev, len(steps(30)), (1, 64), list(range(160, 513, 32)))
    elif name == "alexnet_varres_train":
        # AlexNet (torchvision), SGD with momentum, fp32; 30 steps of batch 16-256 at
        # 96-320 x 96-320 (steps of 32, square), random labels of 1,000 classes.
        import torchvision
        m = torchvision.models.alexnet(weights=None).to(dev).train()
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        for step in steps(30):
            b = random.randint(16, 256); r = random.choice(range(96, 321, 32))
            x = torch.randn(b, 3, r, r, device=dev)
            y = torch.randint(0, 1000, (b,), device=dev)
            optimizer_step(torch.nn.functional.cross_entropy(m(x), y), opt)
    elif name == "squeezebert_varlen_infer":
        # SqueezeBERT (12 layers, d 768, grouped convolutions, vocabulary 30,528), fp32, no
        # grad; 40 batches of random batch 1-64 x length 16-512.
        from transformers import SqueezeBertConfig, SqueezeBertModel
        m = SqueezeBertModel(SqueezeBertConfig()).to(dev).eval()
        infer_random_tokens(m, dev, len(steps(40)), (1, 64), (16, 512), 30000)
    elif name == "canine_varlen_infer":
        # CANINE-s-like character encoder (hash embeddings, downsampling by 4, 12 layers, d
        # 768), fp32, no grad; 30 batches of random batch 1-16 x 128-2,048 code points.
        from transformers import CanineConfig, CanineModel
        m = CanineModel(CanineConfig()).to(dev).eval()
        infer_random_tokens(m, dev, len(steps(30)), (1, 16), (128, 2048), 60000)
    elif name == "rembert_mlm_varlen_train":
        # RemBERT-like masked-LM (8 layers, d 768, 12 heads, FFN 3,072, input embeddings 256,
        # output embeddings 512, vocabulary 50,000), AdamW, bf16 autocast; 30 steps of batch
        # 4-32 x length 32-512, random tokens and labels.
        from transformers import RemBertConfig, RemBertForMaskedLM
        cfg = RemBertConfig(vocab_size=50000, hidden_size=768, num_hidden_layers=8,
                            num_attention_heads=12, intermediate_size=3072,
                            input_embedding_size=256, output_embedding_size=512,
                            max_position_embeddings=512)
        m = RemBertForMaskedLM(cfg).to(dev).train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        for step in steps(30):
            b = random.randint(4, 32); s = random.randint(32, 512)
            x = torch.randint(0, 50000, (b, s), device=dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = m(input_ids=x, labels=x).loss
            optimizer_step(loss, opt)
    elif name == "starcoder2_generate_varprompt":
        # StarCoder2-like decoder (8 layers, d 1,024, 16 heads, 4 key-value heads, FFN 4,096,
        # vocabulary 49,152, sliding window 4,096), fp16, greedy generation of 40 tokens for
        # six (batch, prompt) shapes.
        from transformers import Starcoder2Config, Starcoder2ForCausalLM
        cfg = Starcoder2Config(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16,
                               num_key_value_heads=4, intermediate_size=4096, vocab_size=49152,
                               max_position_embeddings=8192, sliding_window=4096)
        m = Starcoder2ForCausalLM(cfg).to(dev, dtype=torch.float16).eval()
        shapes = [(2, 1500), (16, 64), (1, 3500), (8, 400), (4, 900), (32, 24)]
        generate_fixed(m, dev, capped(shapes), vocab=49000, new_tokens=40, pad_token_id=0)
    elif name == "biogpt_generate_varbatch":
        # BioGPT-like decoder (12 layers, d 768, 12 heads, FFN 3,072, vocabulary 42,384,
        # learned positions up to 1,024), fp16, greedy generation of 32 tokens for six (batch,
        # prompt) shapes.
        from transformers import BioGptConfig, BioGptForCausalLM
        cfg = BioGptConfig(vocab_size=42384, hidden_size=768, num_hidden_layers=12,
                           num_attention_heads=12, intermediate_size=3072,
                           max_position_embeddings=1024)
        m = BioGptForCausalLM(cfg).to(dev, dtype=torch.float16).eval()
        shapes = [(32, 48), (4, 500), (64, 16), (1, 900), (16, 160), (8, 320)]
        generate_fixed(m, dev, capped(shapes), vocab=42000, new_tokens=32, pad_token_id=1)
    else:
        raise SystemExit("unknown workload " + name)

if __name__ == "__main__":
    record_main(run)
