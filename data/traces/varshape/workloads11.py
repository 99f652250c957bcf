# An eleventh held-out set of variable-shape workloads for the allocation policy (issue 27),
# recorded with ../shared/gpu/record_trace.py's machinery by record6.sh (SCRIPT=workloads11.py)
# into a folder outside the repository:
#   held out 11: googlenet_varres_infer, s3d_varclip_infer, maxvit_varbatch_infer,
#                mnasnet_varres_train, nystromformer_varlen_infer, mpnet_mlm_varlen_train,
#                gptneo_generate_varbatch
# None of these architectures is in workloads.py or workloads6.py to workloads10.py. They were
# written on 2026-12-05 (20:25 UTC), after a change to the regrowth of `before_grow` (a cap on
# how far one regrown segment may raise the reserved high-water mark) had been measured on the
# sets already looked at, and before any figure of these was seen, to judge that change once
# (the test fixed in advance is in README.md, "The eleventh held-out set"). Every model is
# built from a config with random weights (no pretrained weights, no network); every run is
# seeded with seeded_cuda(). Step counts keep each history well under the recorder's
# 5,000,000 entries. W11_MAX_STEPS=N (a check run only, never a recording) caps every loop.
import os, random, sys, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from workload_steps import generate_fixed, infer_random_tokens, optimizer_step, record_main, seeded_cuda, step_limits

steps, capped = step_limits("W11_MAX_STEPS")

def run(name):
    dev = seeded_cuda()
    if name == "googlenet_varres_infer":
        # GoogLeNet (torchvision, no auxiliary heads), fp32, no grad; 30 batches of 1-64 images
        # at 96-448 x 96-448 (steps of 32, height and width drawn apart).
        import torchvision
        m = torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=True).to(dev).eval()
        with torch.no_grad():
            for step in steps(30):
                b = random.randint(1, 64)
                h = random.choice(range(96, 449, 32)); w = random.choice(range(96, 449, 32))
                m(torch.randn(b, 3, h, w, device=dev))
    elif name == "s3d_varclip_infer":
        # S3D video classifier (torchvision), fp32, no grad; 20 batches of 1-6 clips of 16-48
        # frames (steps of 8) at 224-320 x 224-320 (steps of 32). (Was 128-224: S3D's final
        # 2x7x7 average pool refused inputs under 224, in the first recording call, 2026-12-06
        # 03:14 UTC; changed from that error alone, no figure of this workload seen.)
        import torchvision
        m = torchvision.models.video.s3d(weights=None).to(dev).eval()
        with torch.no_grad():
            for step in steps(20):
                b = random.randint(1, 6); t = random.choice(range(16, 49, 8))
                h = random.choice(range(224, 321, 32)); w = random.choice(range(224, 321, 32))
                m(torch.randn(b, 3, t, h, w, device=dev))
    elif name == "maxvit_varbatch_infer":
        # MaxViT-T (torchvision), bf16 autocast, no grad; 30 batches of random batch 1-96 at
        # 224 x 224 (its window partition fixes the resolution).
        import torchvision
        m = torchvision.models.maxvit_t(weights=None).to(dev).eval()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            for step in steps(30):
                m(torch.randn(random.randint(1, 96), 3, 224, 224, device=dev))
    elif name == "mnasnet_varres_train":
        # MNASNet 1.0 (torchvision) classifier training, SGD with momentum, fp32; 30 steps of
        # batch 8-64 at 128-320 x 128-320 (steps of 32, square), 1,000 classes.
        import torchvision
        m = torchvision.models.mnasnet1_0(weights=None).to(dev).train()
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        for step in steps(30):
            b = random.randint(8, 64); r = random.choice(range(128, 321, 32))
            x = torch.randn(b, 3, r, r, device=dev); y = torch.randint(0, 1000, (b,), device=dev)
            optimizer_step(torch.nn.functional.cross_entropy(m(x), y), opt)
    elif name == "nystromformer_varlen_infer":
        # Nystromformer encoder (12 layers, d 768, 12 heads, FFN 3,072, 64 landmarks,
        # vocabulary 30,000, positions 4,096), fp32, no grad; 30 batches of random batch 1-16 x
        # length 64-4,000 (Nystrom attention: memory linear in the length).
        from transformers import NystromformerConfig, NystromformerModel
        cfg = NystromformerConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                  intermediate_size=3072, num_landmarks=64, vocab_size=30000,
                                  max_position_embeddings=4098)
        m = NystromformerModel(cfg).to(dev).eval()
        infer_random_tokens(m, dev, len(steps(30)), (1, 16), (64, 4000), 30000)
    elif name == "mpnet_mlm_varlen_train":
        # MPNet-base-like masked language model (12 layers, d 768, 12 heads, FFN 3,072,
        # vocabulary 30,527), AdamW, fp32; 24 steps of batch 4-48 x length 32-512, 15% of the
        # tokens as labels.
        from transformers import MPNetConfig, MPNetForMaskedLM
        cfg = MPNetConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                          intermediate_size=3072, vocab_size=30527, max_position_embeddings=514)
        m = MPNetForMaskedLM(cfg).to(dev).train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        for step in steps(24):
            b = random.randint(4, 48); s = random.randint(32, 512)
            x = torch.randint(5, 30000, (b, s), device=dev)
            labels = torch.where(torch.rand(b, s, device=dev) < 0.15, x, torch.full_like(x, -100))
            optimizer_step(m(input_ids=x, labels=labels).loss, opt)
    elif name == "gptneo_generate_varbatch":
        # GPT-Neo-like decoder (12 layers, d 768, 12 heads, alternating global and local
        # attention with a 256-token window, vocabulary 50,257), fp16, greedy generation of 40
        # tokens for six (batch, prompt) shapes.
        from transformers import GPTNeoConfig, GPTNeoForCausalLM
        cfg = GPTNeoConfig(hidden_size=768, num_layers=12, num_heads=12,
                           attention_types=[[["global", "local"], 6]], window_size=256,
                           vocab_size=50257, max_position_embeddings=2048)
        m = GPTNeoForCausalLM(cfg).to(dev, dtype=torch.float16).eval()
        shapes = [(24, 64), (2, 900), (48, 16), (6, 400), (1, 1500), (16, 200)]
        generate_fixed(m, dev, capped(shapes), vocab=50000, new_tokens=40, pad_token_id=0)
    else:
        raise SystemExit("unknown workload " + name)
    if dev.type == "cuda":
        torch.cuda.synchronize()

if __name__ == "__main__":
    record_main(run)
