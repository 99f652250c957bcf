# An eighth held-out set of variable-shape workloads for the allocation policy (issue 27),
# recorded with ../shared/gpu/record_trace.py's machinery on the H200 by record6.sh
# (SCRIPT=workloads8.py) into a folder outside the repository:
#   held out 8: vgg16bn_varres_infer, marian_translate_varbatch, bloom_generate_varprompt,
#               gru_lm_varbptt_train, fasterrcnn_mobilenet_varsize_infer, lraspp_varsize_infer,
#               albert_varlen_train
# None of these architectures is in workloads.py, workloads6.py or workloads7.py. They were
# written before any figure of theirs was seen, to judge once whatever the ninth round of
# issue 27 proposes. Every model is built from a config with random weights (no pretrained
# weights, no network); every run is seeded with seeded_cuda().
# W8_MAX_STEPS=N (a check run only, never a recording) caps every loop at N steps.
import os, random, sys, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from workload_steps import detect_untrained, generate_fixed, optimizer_step, record_main, seeded_cuda

CAP = int(os.environ.get("W8_MAX_STEPS", "0"))

def steps(n):
    return range(min(n, CAP) if CAP else n)

def capped(shapes):
    return shapes[:CAP] if CAP else shapes

def run(name):
    dev = seeded_cuda()
    if name == "vgg16bn_varres_infer":
        # VGG-16 with batch norm (torchvision), fp16 autocast, no grad; 30 batches of 1-32
        # non-square images, height and width each 160-512 in steps of 32.
        import torchvision
        m = torchvision.models.vgg16_bn(weights=None).to(dev).eval()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
            for step in steps(30):
                b = random.randint(1, 32)
                h = random.choice(range(160, 513, 32)); w = random.choice(range(160, 513, 32))
                m(torch.randn(b, 3, h, w, device=dev))
    elif name == "marian_translate_varbatch":
        # MarianMT-like translation model (6+6 layers, d 512, 8 heads, vocabulary 58,101), fp32,
        # greedy generation of 40 tokens for six (batch, source length) shapes.
        from transformers import MarianConfig, MarianMTModel
        m = MarianMTModel(MarianConfig()).to(dev).eval()
        shapes = [(32, 40), (4, 256), (64, 20), (1, 500), (16, 120), (8, 64)]
        generate_fixed(m, dev, capped(shapes), vocab=58000, new_tokens=40)
    elif name == "bloom_generate_varprompt":
        # BLOOM-like decoder (ALiBi positions, 16 layers, d 1024, 16 heads, vocabulary 250,880),
        # bf16, greedy generation of 36 tokens for six (batch, prompt) shapes.
        from transformers import BloomConfig, BloomForCausalLM
        cfg = BloomConfig(hidden_size=1024, n_layer=16, n_head=16, vocab_size=250880)
        m = BloomForCausalLM(cfg).to(dev, dtype=torch.bfloat16).eval()
        shapes = [(8, 100), (1, 900), (20, 60), (3, 450), (12, 220), (2, 1400)]
        generate_fixed(m, dev, capped(shapes), vocab=250000, new_tokens=36, pad_token_id=3)
    elif name == "gru_lm_varbptt_train":
        # A word-level language model: embedding (32,000 x 512), 2-layer GRU (hidden 1,024),
        # linear to 32,000 words, Adam, fp32; 30 steps of random batch 16-128 and truncated
        # back-propagation length 35-280.
        emb = torch.nn.Embedding(32000, 512).to(dev)
        gru = torch.nn.GRU(512, 1024, num_layers=2, batch_first=True).to(dev)
        head = torch.nn.Linear(1024, 32000).to(dev)
        params = list(emb.parameters()) + list(gru.parameters()) + list(head.parameters())
        opt = torch.optim.Adam(params, lr=1e-3)
        for step in steps(30):
            b = random.randint(16, 128); t = random.randint(35, 280)
            ids = torch.randint(0, 32000, (b, t + 1), device=dev)
            out, _ = gru(emb(ids[:, :-1]))
            loss = torch.nn.functional.cross_entropy(head(out).reshape(-1, 32000), ids[:, 1:].reshape(-1))
            optimizer_step(loss, opt)
    elif name == "fasterrcnn_mobilenet_varsize_infer":
        # Faster R-CNN with a MobileNetV3-Large FPN backbone (torchvision), fp32, no grad; 20
        # batches of 1-8 images of random height and width 240-1280 (the model's transform
        # resizes and pads them).
        detect_untrained("fasterrcnn_mobilenet_v3_large_fpn", dev, 20 if not CAP else CAP, (1, 8), (240, 1280))
    elif name == "lraspp_varsize_infer":
        # LR-ASPP segmentation with a MobileNetV3-Large backbone (torchvision, 21 classes), fp32,
        # no grad; 30 batches of 1-16 non-square images, height and width each 256-1024 in
        # steps of 16.
        import torchvision
        m = torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                      num_classes=21).to(dev).eval()
        with torch.no_grad():
            for step in steps(30):
                b = random.randint(1, 16)
                h = random.choice(range(256, 1025, 16)); w = random.choice(range(256, 1025, 16))
                m(torch.randn(b, 3, h, w, device=dev))
    elif name == "albert_varlen_train":
        # ALBERT-base-like masked language model (shared layers, embedding 128, 12 layers, d 768,
        # vocabulary 30,000), AdamW, bf16 autocast; 24 steps of random batch 4-48 x length
        # 32-512.
        from transformers import AlbertConfig, AlbertForMaskedLM
        cfg = AlbertConfig(embedding_size=128, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                           intermediate_size=3072, vocab_size=30000)
        m = AlbertForMaskedLM(cfg).to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        for step in steps(24):
            b = random.randint(4, 48); s = random.randint(32, 512)
            ids = torch.randint(5, 30000, (b, s), device=dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = m(input_ids=ids, labels=ids).loss
            optimizer_step(loss, opt)
    else:
        raise SystemExit("unknown workload " + name)
    if dev.type == "cuda":
        torch.cuda.synchronize()

if __name__ == "__main__":
    record_main(run)
