# A thirteenth held-out set of variable-shape workloads for the allocation policy (issue 27),
# to be recorded with ../shared/gpu/record_trace.py's machinery by record6.sh
# (SCRIPT=workloads13.py) into a folder outside the repository:
#   held out 13: hubert_varlen_infer, efficientnetv2_varres_train, stablelm_generate_varprompt,
#                mbart_translate_varbatch, mobilebert_varlen_infer, ssd300_varbatch_infer,
#                olmo_generate_varbatch
# None of these architectures is in workloads.py or workloads6.py to workloads12.py. They were
# written on 2026-12-06 (about 08:10 UTC), when the thirteenth round had kept no candidate and
# no device time was left to record them: they wait for the next round, which fixes its
# candidate and the test that judges it (in README.md) before recording them, and records them
# before reading any of their figures. Not run before commit (no PyTorch on the build machine):
# a check run first (W13_MAX_STEPS=1, its figures not read) finds API mistakes.
# Every model is built from a config with random weights (no pretrained weights, no network);
# every run is seeded with seeded_cuda(). Step counts keep each history well under the
# recorder's 5,000,000 entries. W13_MAX_STEPS=N (a check run only, never a recording) caps
# every loop.
import os, random, sys, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from workload_steps import (detect_untrained, generate_fixed, infer_random_tokens, optimizer_step,
                            record_main, seeded_cuda, step_limits)

steps, capped = step_limits("W13_MAX_STEPS")

def run(name):
    dev = seeded_cuda()
    if name == "hubert_varlen_infer":
        # HuBERT-base-like speech encoder (7-layer conv feature extractor over raw 16 kHz audio,
        # 12 transformer layers, d 768), fp32, no grad; 28 batches of 1-8 clips of 0.5-16 s.
        from transformers import HubertConfig, HubertModel
        m = HubertModel(HubertConfig()).to(dev).eval()
        with torch.no_grad():
            for step in steps(28):
                b = random.randint(1, 8)
                n = int(16000 * random.uniform(0.5, 16.0))
                m(torch.randn(b, n, device=dev))
    elif name == "efficientnetv2_varres_train":
        # EfficientNetV2-S (torchvision), SGD with momentum, bf16 autocast; 24 steps of batch
        # 8-48 at 128-384 x 128-384 (steps of 32, square), random labels of 1,000 classes.
        import torchvision
        m = torchvision.models.efficientnet_v2_s(weights=None).to(dev).train()
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        for step in steps(24):
            b = random.randint(8, 48); r = random.choice(range(128, 385, 32))
            x = torch.randn(b, 3, r, r, device=dev)
            y = torch.randint(0, 1000, (b,), device=dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(m(x), y)
            optimizer_step(loss, opt)
    elif name == "stablelm_generate_varprompt":
        # StableLM-like decoder (8 layers, d 1,024, 16 heads, partial rotary, FFN 2,816,
        # vocabulary 50,304), fp16, greedy generation of 40 tokens for six (batch, prompt)
        # shapes.
        from transformers import StableLmConfig, StableLmForCausalLM
        cfg = StableLmConfig(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16,
                             num_key_value_heads=16, intermediate_size=2816, vocab_size=50304,
                             max_position_embeddings=4096)
        m = StableLmForCausalLM(cfg).to(dev, dtype=torch.float16).eval()
        shapes = [(4, 200), (1, 2000), (16, 48), (2, 1200), (8, 600), (1, 3000)]
        generate_fixed(m, dev, capped(shapes), vocab=50000, new_tokens=40, pad_token_id=0)
    elif name == "mbart_translate_varbatch":
        # mBART-like encoder-decoder (6 + 6 layers, d 512, 8 heads, FFN 2,048, vocabulary
        # 50,000), fp32, greedy generation of 40 tokens for six (batch, source length) shapes.
        from transformers import MBartConfig, MBartForConditionalGeneration
        cfg = MBartConfig(vocab_size=50000, d_model=512, encoder_layers=6, decoder_layers=6,
                          encoder_attention_heads=8, decoder_attention_heads=8,
                          encoder_ffn_dim=2048, decoder_ffn_dim=2048, max_position_embeddings=1024)
        m = MBartForConditionalGeneration(cfg).to(dev).eval()
        shapes = [(32, 40), (4, 400), (1, 1000), (16, 120), (48, 24), (8, 256)]
        generate_fixed(m, dev, capped(shapes), vocab=49000, new_tokens=40,
                       decoder_start_token_id=2, pad_token_id=1)
    elif name == "mobilebert_varlen_infer":
        # MobileBERT (24 layers, d 512 with 128 bottlenecks, vocabulary 30,522), fp32, no grad;
        # 40 batches of random batch 1-64 x length 16-512.
        from transformers import MobileBertConfig, MobileBertModel
        m = MobileBertModel(MobileBertConfig()).to(dev).eval()
        infer_random_tokens(m, dev, len(steps(40)), (1, 64), (16, 512), 30000)
    elif name == "ssd300_varbatch_infer":
        # SSD300 with a VGG-16 backbone (torchvision), fp32, no grad; 16 lists of 1-24 images of
        # 200-900 x 200-900 (the model resizes each to 300 x 300: the batch varies).
        detect_untrained("ssd300_vgg16", dev, len(steps(16)), images=(1, 24), side=(200, 900))
    elif name == "olmo_generate_varbatch":
        # OLMo-like decoder (8 layers, d 1,024, 16 heads, FFN 2,816, vocabulary 50,304), fp16,
        # greedy generation of 32 tokens for six (batch, prompt) shapes.
        from transformers import OlmoConfig, OlmoForCausalLM
        cfg = OlmoConfig(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16,
                         num_key_value_heads=16, intermediate_size=2816, vocab_size=50304,
                         max_position_embeddings=4096, pad_token_id=1)
        m = OlmoForCausalLM(cfg).to(dev, dtype=torch.float16).eval()
        shapes = [(24, 64), (2, 1000), (48, 16), (8, 300), (1, 2500), (16, 128)]
        generate_fixed(m, dev, capped(shapes), vocab=50000, new_tokens=32, pad_token_id=1)
    else:
        raise SystemExit("unknown workload " + name)

if __name__ == "__main__":
    record_main(run)
