# A seventh held-out set of variable-shape workloads for the allocation policy (issue 27),
# recorded with ../shared/gpu/record_trace.py's machinery on the H200 by record6.sh
# (SCRIPT=workloads7.py) into a folder outside the repository:
#   held out 7: segformer_varres_infer, bilstm_packed_infer, phi_generate_varprompt,
#               clip_varbatch_infer, yolos_varsize_infer, resnext_varres_train,
#               gptbigcode_generate_growbatch
# None of these architectures is in workloads.py or workloads6.py. They were written after the
# policy test for this set was fixed in advance (docs/performance.md, "an eighth round"), and
# before any figure of theirs was seen. Every model is built from a config with random weights
# (no pretrained weights, no network); every run is seeded with seeded_cuda().
# W7_MAX_STEPS=N (a check run only, never a recording) caps every loop at N steps.
import os, random, sys, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from workload_steps import generate_fixed, optimizer_step, record_main, seeded_cuda

CAP = int(os.environ.get("W7_MAX_STEPS", "0"))

def steps(n):
    return range(min(n, CAP) if CAP else n)

def capped(shapes):
    return shapes[:CAP] if CAP else shapes

def run(name):
    dev = seeded_cuda()
    if name == "segformer_varres_infer":
        # SegFormer-B2-like semantic segmentation (Mix Transformer encoder, depths 3-4-6-3, widths
        # 64-128-320-512, all-MLP decoder 768, 150 classes), fp32, no grad; batches of 1-8
        # non-square images, height and width each 256-1024 in steps of 32.
        from transformers import SegformerConfig, SegformerForSemanticSegmentation
        cfg = SegformerConfig(depths=[3, 4, 6, 3], hidden_sizes=[64, 128, 320, 512], decoder_hidden_size=768,
                              num_labels=150)
        m = SegformerForSemanticSegmentation(cfg).to(dev).eval()
        with torch.no_grad():
            for step in steps(30):
                b = random.randint(1, 8)
                h = random.choice(range(256, 1025, 32)); w = random.choice(range(256, 1025, 32))
                m(pixel_values=torch.randn(b, 3, h, w, device=dev))
    elif name == "bilstm_packed_infer":
        # A sequence tagger: embedding (30,000 x 300), 3-layer bidirectional LSTM (hidden 512),
        # linear to 50 tags, fp32, no grad; 40 batches of 16-256 sequences of random lengths
        # 5-600, packed (enforce_sorted=False).
        emb = torch.nn.Embedding(30000, 300).to(dev)
        lstm = torch.nn.LSTM(300, 512, num_layers=3, bidirectional=True, batch_first=True).to(dev)
        head = torch.nn.Linear(1024, 50).to(dev)
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
        with torch.no_grad():
            for step in steps(40):
                b = random.randint(16, 256)
                lengths = [random.randint(5, 600) for _ in range(b)]
                ids = torch.randint(0, 30000, (b, max(lengths)), device=dev)
                packed = pack_padded_sequence(emb(ids), torch.tensor(lengths), batch_first=True,
                                              enforce_sorted=False)
                out, _ = lstm(packed)
                padded, _ = pad_packed_sequence(out, batch_first=True)
                head(padded).argmax(-1)
    elif name == "phi_generate_varprompt":
        # Phi-like decoder (parallel attention and MLP, partial rotary, 12 layers, d 1024, 16
        # heads, vocabulary 51,200), fp16, greedy generation of 32 tokens for six (batch, prompt)
        # shapes in no particular order.
        from transformers import PhiConfig, PhiForCausalLM
        cfg = PhiConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=12, num_attention_heads=16,
                        vocab_size=51200, max_position_embeddings=2048)
        m = PhiForCausalLM(cfg).to(dev, dtype=torch.float16).eval()
        shapes = [(4, 64), (24, 180), (1, 1200), (10, 400), (2, 800), (16, 96)]
        generate_fixed(m, dev, capped(shapes), vocab=50000, new_tokens=32, pad_token_id=0)
    elif name == "clip_varbatch_infer":
        # CLIP ViT-B/32-like dual encoder (vision 12 layers d 768 at 224 x 224, text 12 layers
        # d 512), fp16 autocast, no grad; 36 batches of 1-128 images with as many captions of
        # random length 8-77, scored against each other.
        from transformers import CLIPConfig, CLIPModel
        m = CLIPModel(CLIPConfig()).to(dev).eval()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
            for step in steps(36):
                b = random.randint(1, 128); s = random.randint(8, 77)
                out = m(input_ids=torch.randint(0, 49000, (b, s), device=dev),
                        pixel_values=torch.randn(b, 3, 224, 224, device=dev))
                out.logits_per_image.softmax(-1)
    elif name == "yolos_varsize_infer":
        # YOLOS-small-like detector (ViT, 12 layers, d 384, 6 heads, patch 16, 100 detection
        # tokens, position embeddings interpolated to every size), fp32, no grad; batches of 1-4
        # images of one random height and width 320-896 each.
        from transformers import YolosConfig, YolosForObjectDetection
        cfg = YolosConfig(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, intermediate_size=1536,
                          num_labels=91)
        m = YolosForObjectDetection(cfg).to(dev).eval()
        with torch.no_grad():
            for step in steps(24):
                b = random.randint(1, 4)
                h = random.randint(320, 896); w = random.randint(320, 896)
                m(pixel_values=torch.randn(b, 3, h, w, device=dev))
    elif name == "resnext_varres_train":
        # ResNeXt-50 (32x4d) classification training (1,000 classes, SGD with momentum, bf16
        # autocast, channels-last), 20 steps of random batch 8-96 at square resolution 160-288
        # (steps of 32).
        import torchvision
        m = torchvision.models.resnext50_32x4d(weights=None).to(dev).to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        for step in steps(20):
            b = random.randint(8, 96); r = random.choice(range(160, 289, 32))
            x = torch.randn(b, 3, r, r, device=dev).to(memory_format=torch.channels_last)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = m(x)
            loss = torch.nn.functional.cross_entropy(logits.float(), torch.randint(0, 1000, (b,), device=dev))
            optimizer_step(loss, opt)
    elif name == "gptbigcode_generate_growbatch":
        # GPTBigCode-like code model (multi-query attention, 12 layers, d 1024, 16 heads,
        # vocabulary 49,152), bf16, greedy generation of 48 tokens while the batch grows and the
        # prompt shrinks, as a server admitting more requests of shorter code.
        from transformers import GPTBigCodeConfig, GPTBigCodeForCausalLM
        cfg = GPTBigCodeConfig(n_embd=1024, n_layer=12, n_head=16, vocab_size=49152, n_positions=2048,
                               multi_query=True)
        m = GPTBigCodeForCausalLM(cfg).to(dev, dtype=torch.bfloat16).eval()
        shapes = [(1, 1400), (2, 900), (6, 500), (12, 260), (24, 120), (48, 48)]
        generate_fixed(m, dev, capped(shapes), vocab=49000, new_tokens=48, pad_token_id=0)
    else:
        raise SystemExit("unknown workload " + name)
    if dev.type == "cuda":
        torch.cuda.synchronize()

if __name__ == "__main__":
    record_main(run)
