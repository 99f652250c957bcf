# A twelfth held-out set of variable-shape workloads for the allocation policy (issue 27),
# recorded with ../shared/gpu/record_trace.py's machinery by record6.sh (SCRIPT=workloads12.py)
# into a folder outside the repository:
#   held out 12: squeezenet_varres_infer, swin3d_varclip_infer, bigbird_varlen_infer,
#                distilbert_mlm_varlen_train, fnet_mlm_varlen_train, mixtral_generate_varbatch,
#                gptj_generate_varprompt
# None of these architectures is in workloads.py or workloads6.py to workloads11.py. They were
# written on 2026-12-06 (before 05:28 UTC, commit 2f4a4b2), after a change to `before_grow`'s consolidation (occupied
# segments whose live blocks move into the merged segment, `consolidate_live:True`) had been
# measured on the sets already looked at, and before any figure of these was seen, to judge
# that change once (the test fixed in advance is in README.md, "The twelfth held-out set").
# Every model is built from a config with random weights (no pretrained weights, no network);
# every run is seeded with seeded_cuda(). Step counts keep each history well under the
# recorder's 5,000,000 entries. W12_MAX_STEPS=N (a check run only, never a recording) caps
# every loop.
import os, random, sys, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from workload_steps import generate_fixed, infer_random_tokens, optimizer_step, record_main, seeded_cuda, step_limits

steps, capped = step_limits("W12_MAX_STEPS")

def mlm_train(m, dev, n, batch, seq, vocab):
    """`n` AdamW steps of masked-LM `m` on random token ids of random batch in `batch` and
    length in `seq` (inclusive pairs), 15% of the tokens as labels."""
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    for step in steps(n):
        b = random.randint(*batch); s = random.randint(*seq)
        x = torch.randint(5, vocab, (b, s), device=dev)
        labels = torch.where(torch.rand(b, s, device=dev) < 0.15, x, torch.full_like(x, -100))
        optimizer_step(m(input_ids=x, labels=labels).loss, opt)

def run(name):
    dev = seeded_cuda()
    if name == "squeezenet_varres_infer":
        # SqueezeNet 1.1 (torchvision), fp32, no grad; 30 batches of 1-128 images at 64-512 x
        # 64-512 (steps of 32, height and width drawn apart).
        import torchvision
        m = torchvision.models.squeezenet1_1(weights=None).to(dev).eval()
        with torch.no_grad():
            for step in steps(30):
                b = random.randint(1, 128)
                h = random.choice(range(64, 513, 32)); w = random.choice(range(64, 513, 32))
                m(torch.randn(b, 3, h, w, device=dev))
    elif name == "swin3d_varclip_infer":
        # Video Swin-T (torchvision swin3d_t), bf16 autocast, no grad; 20 batches of 1-4 clips
        # of 8-32 frames (steps of 8) at 160-288 x 160-288 (steps of 32).
        import torchvision
        m = torchvision.models.video.swin3d_t(weights=None).to(dev).eval()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            for step in steps(20):
                b = random.randint(1, 4); t = random.choice(range(8, 33, 8))
                h = random.choice(range(160, 289, 32)); w = random.choice(range(160, 289, 32))
                m(torch.randn(b, 3, t, h, w, device=dev))
    elif name == "bigbird_varlen_infer":
        # BigBird encoder (12 layers, d 768, 12 heads, FFN 3,072, block-sparse attention with
        # blocks of 64 and 3 random blocks, vocabulary 50,358, positions 4,096), fp32, no grad;
        # 30 batches of random batch 1-8 x length 64-4,000 (short inputs fall back to full
        # attention).
        from transformers import BigBirdConfig, BigBirdModel
        cfg = BigBirdConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                            intermediate_size=3072, vocab_size=50358, max_position_embeddings=4096,
                            attention_type="block_sparse", block_size=64, num_random_blocks=3)
        m = BigBirdModel(cfg).to(dev).eval()
        infer_random_tokens(m, dev, len(steps(30)), (1, 8), (64, 4000), 50000)
    elif name == "distilbert_mlm_varlen_train":
        # DistilBERT masked language model (6 layers, d 768, 12 heads, FFN 3,072, vocabulary
        # 30,522), AdamW, fp32; 30 steps of batch 4-64 x length 32-512.
        from transformers import DistilBertConfig, DistilBertForMaskedLM
        cfg = DistilBertConfig(dim=768, n_layers=6, n_heads=12, hidden_dim=3072, vocab_size=30522,
                               max_position_embeddings=512)
        m = DistilBertForMaskedLM(cfg).to(dev).train()
        mlm_train(m, dev, 30, (4, 64), (32, 512), 30000)
    elif name == "fnet_mlm_varlen_train":
        # FNet masked language model (12 layers, d 768, Fourier token mixing, FFN 3,072,
        # vocabulary 32,000), AdamW, fp32; 24 steps of batch 4-32 x length 32-512.
        from transformers import FNetConfig, FNetForMaskedLM
        cfg = FNetConfig(hidden_size=768, num_hidden_layers=12, intermediate_size=3072,
                         vocab_size=32000, max_position_embeddings=512, use_tpu_fourier_optimizations=False)
        m = FNetForMaskedLM(cfg).to(dev).train()
        mlm_train(m, dev, 24, (4, 32), (32, 512), 32000)
    elif name == "mixtral_generate_varbatch":
        # Mixtral-like sparse mixture-of-experts decoder (6 layers, d 1,024, 16 heads, 8 key
        # and value heads, 8 experts of FFN 2,816 with top-2 routing, vocabulary 32,000), fp16,
        # greedy generation of 32 tokens for six (batch, prompt) shapes.
        from transformers import MixtralConfig, MixtralForCausalLM
        cfg = MixtralConfig(hidden_size=1024, num_hidden_layers=6, num_attention_heads=16,
                            num_key_value_heads=8, intermediate_size=2816, num_local_experts=8,
                            num_experts_per_tok=2, vocab_size=32000, max_position_embeddings=4096)
        m = MixtralForCausalLM(cfg).to(dev, dtype=torch.float16).eval()
        shapes = [(16, 64), (1, 1200), (32, 24), (4, 500), (2, 900), (12, 160)]
        generate_fixed(m, dev, capped(shapes), vocab=32000, new_tokens=32, pad_token_id=0)
    elif name == "gptj_generate_varprompt":
        # GPT-J-like decoder (10 layers, d 1,024, 16 heads, rotary dimension 64, parallel
        # attention and feed-forward, vocabulary 50,400), fp16, greedy generation of 48 tokens
        # for six (batch, prompt) shapes.
        from transformers import GPTJConfig, GPTJForCausalLM
        cfg = GPTJConfig(n_embd=1024, n_layer=10, n_head=16, rotary_dim=64, vocab_size=50400,
                         n_positions=2048)
        m = GPTJForCausalLM(cfg).to(dev, dtype=torch.float16).eval()
        shapes = [(8, 100), (1, 1700), (24, 40), (3, 700), (12, 300), (2, 1100)]
        generate_fixed(m, dev, capped(shapes), vocab=50000, new_tokens=48, pad_token_id=0)
    else:
        raise SystemExit("unknown workload " + name)
    if dev.type == "cuda":
        torch.cuda.synchronize()

if __name__ == "__main__":
    record_main(run)
