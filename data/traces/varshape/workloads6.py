# A sixth held-out set of variable-shape workloads for the allocation policy (issue 27),
# recorded with ../shared/gpu/record_trace.py's machinery on the H200 by record6.sh into a folder
# outside the repository (never replayed by the helper that wrote them):
#   held out 6: wav2vec2_varlen_infer, dinov2_varres_infer, detr_varsize_infer,
#               gemma_generate_growprompt, longformer_growlen_infer, mobilevit_varres_train
# None of these architectures is in workloads.py. Every model is built from a config with random
# weights (no pretrained weights, no network); every run is seeded with seeded_cuda().
# W6_MAX_STEPS=N (a check run only, never a recording) caps every loop at N steps.
import os, random, sys, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from workload_steps import generate_fixed, optimizer_step, record_main, seeded_cuda

CAP = int(os.environ.get("W6_MAX_STEPS", "0"))

def steps(n):
    return range(min(n, CAP) if CAP else n)

def run(name):
    dev = seeded_cuda()
    if name == "wav2vec2_varlen_infer":
        # wav2vec2-base-like speech encoder (7-layer conv feature extractor over raw 16 kHz audio,
        # 12 transformer layers, d 768), fp32, no grad; clips grow: the longest allowed length
        # rises from 4 s to 20 s over the run, each batch of random size and length.
        from transformers import Wav2Vec2Config, Wav2Vec2Model
        m = Wav2Vec2Model(Wav2Vec2Config()).to(dev).eval()
        with torch.no_grad():
            for step in steps(32):
                b = random.randint(1, 12)
                longest = 4.0 + 16.0 * step / 31
                n = int(16000 * random.uniform(0.5, longest))
                m(torch.randn(b, n, device=dev))
    elif name == "dinov2_varres_infer":
        # DINOv2-base-like ViT (patch 14, 12 layers, d 768, position embeddings interpolated to
        # every size), bf16 autocast, no grad; non-square images, height and width each 168-518.
        from transformers import Dinov2Config, Dinov2Model
        m = Dinov2Model(Dinov2Config(image_size=518, patch_size=14)).to(dev).eval()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            for step in steps(36):
                b = random.randint(1, 32)
                h = random.choice(range(168, 519, 14)); w = random.choice(range(168, 519, 14))
                m(torch.randn(b, 3, h, w, device=dev))
    elif name == "detr_varsize_infer":
        # DETR (ResNet-50 backbone through transformers' own ResNet, 6+6 transformer layers,
        # 100 queries), fp32, no grad; batches of 1-6 images of random height and width
        # 320-1024, padded to the batch's largest with a pixel mask as DETR's processor does.
        from transformers import DetrConfig, DetrForObjectDetection, ResNetConfig
        cfg = DetrConfig(backbone_config=ResNetConfig(out_features=["stage1", "stage2", "stage3", "stage4"]),
                         num_labels=91)
        m = DetrForObjectDetection(cfg).to(dev).eval()
        with torch.no_grad():
            for step in steps(16):
                b = random.randint(1, 6)
                sizes = [(random.randint(320, 1024), random.randint(320, 1024)) for _ in range(b)]
                H = max(h for h, _ in sizes); W = max(w for _, w in sizes)
                x = torch.zeros(b, 3, H, W, device=dev)
                mask = torch.zeros(b, H, W, dtype=torch.long, device=dev)
                for i, (h, w) in enumerate(sizes):
                    x[i, :, :h, :w] = torch.randn(3, h, w, device=dev)
                    mask[i, :h, :w] = 1
                m(pixel_values=x, pixel_mask=mask)
    elif name == "gemma_generate_growprompt":
        # Gemma-style decoder (8 layers, d 1024, 8 heads with one shared KV head, head dim 128,
        # GeGLU MLP 4096, vocabulary 256,000), bf16, greedy generation of 40 tokens per turn of a
        # growing conversation: the prompt grows turn by turn while the batch shrinks.
        from transformers import GemmaConfig, GemmaForCausalLM
        cfg = GemmaConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=8, num_attention_heads=8,
                          num_key_value_heads=1, head_dim=128, vocab_size=256000)
        m = GemmaForCausalLM(cfg).to(dev, dtype=torch.bfloat16).eval()
        turns = [(16, 32), (12, 140), (8, 300), (6, 520), (3, 900), (1, 1500)]
        generate_fixed(m, dev, turns[:CAP] if CAP else turns, vocab=255000, new_tokens=40, pad_token_id=0)
    elif name == "longformer_growlen_infer":
        # Longformer-base-like encoder (12 layers, d 768, sliding-window attention of 256 with
        # global attention on the first token), fp32, no grad; sequences grow: the longest
        # allowed length rises from 512 to 4,096 over the run, batch 1-6, padded by the model
        # to a multiple of the window.
        from transformers import LongformerConfig, LongformerModel
        cfg = LongformerConfig(attention_window=256, max_position_embeddings=4098, vocab_size=50265,
                               pad_token_id=1)
        m = LongformerModel(cfg).to(dev).eval()
        with torch.no_grad():
            for step in steps(28):
                b = random.randint(1, 6)
                s = random.randint(64, 512 + (4096 - 512) * step // 27)
                ids = torch.randint(3, 50000, (b, s), device=dev)
                glob = torch.zeros(b, s, dtype=torch.long, device=dev); glob[:, 0] = 1
                m(ids, global_attention_mask=glob)
    elif name == "mobilevit_varres_train":
        # MobileViT-small (MobileNetV2 blocks with unfold-transformer-fold MobileViT blocks)
        # classification training (100 classes, AdamW, bf16 autocast), 18 steps of random batch
        # 8-48 at square resolution 128-320 (steps of 32).
        from transformers import MobileViTConfig, MobileViTForImageClassification
        m = MobileViTForImageClassification(MobileViTConfig(num_labels=100)).to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=2e-3, weight_decay=0.01)
        for step in steps(18):
            b = random.randint(8, 48); r = random.choice(range(128, 321, 32))
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = m(torch.randn(b, 3, r, r, device=dev)).logits
            loss = torch.nn.functional.cross_entropy(logits.float(), torch.randint(0, 100, (b,), device=dev))
            optimizer_step(loss, opt)
    else:
        raise SystemExit("unknown workload " + name)
    if dev.type == "cuda":
        torch.cuda.synchronize()

if __name__ == "__main__":
    record_main(run)
