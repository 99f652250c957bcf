# A ninth held-out set of variable-shape workloads for the allocation policy (issue 27),
# recorded with ../shared/gpu/record_trace.py's machinery on the H200 by record6.sh
# (SCRIPT=workloads9.py) into a folder outside the repository:
#   held out 9: shufflenet_varres_infer, deeplabv3_mobilenet_varres_train,
#               falcon_generate_varprompt, pegasus_summarize_varbatch,
#               embbag_recsys_varbatch_infer, tcn_ctc_varlen_train, modernbert_varlen_infer
# None of these architectures is in workloads.py or workloads6.py to workloads8.py. They were
# written on 2026-12-05 (07:05 UTC, no device lent that session), after small blocks stopped
# moving under the default `relocation:merge` and before any figure of theirs was seen, to
# judge that default once (the test fixed in advance is in README.md, "The ninth held-out
# set"). Every model is built from a config with random weights (no pretrained weights, no
# network); every run is seeded with seeded_cuda().
# W9_MAX_STEPS=N (a check run only, never a recording) caps every loop at N steps.
import os, random, sys, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from workload_steps import generate_fixed, infer_random_tokens, optimizer_step, record_main, seeded_cuda

CAP = int(os.environ.get("W9_MAX_STEPS", "0"))

def steps(n):
    return range(min(n, CAP) if CAP else n)

def capped(shapes):
    return shapes[:CAP] if CAP else shapes

def run(name):
    dev = seeded_cuda()
    if name == "shufflenet_varres_infer":
        # ShuffleNetV2 x1.0 (torchvision), fp32, no grad; 30 batches of 1-48 non-square images,
        # height and width each 128-512 in steps of 32.
        import torchvision
        m = torchvision.models.shufflenet_v2_x1_0(weights=None).to(dev).eval()
        with torch.no_grad():
            for step in steps(30):
                b = random.randint(1, 48)
                h = random.choice(range(128, 513, 32)); w = random.choice(range(128, 513, 32))
                m(torch.randn(b, 3, h, w, device=dev))
    elif name == "deeplabv3_mobilenet_varres_train":
        # DeepLabV3 with a MobileNetV3-Large backbone (torchvision, 21 classes), trained with SGD
        # (momentum 0.9), fp32; 24 steps of batch 2-12 at height and width each 256-640 in steps
        # of 32, cross-entropy against random labels.
        import torchvision
        m = torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=21, aux_loss=False).to(dev).train()
        opt = torch.optim.SGD(m.parameters(), lr=1e-2, momentum=0.9)
        for step in steps(24):
            b = random.randint(2, 12)
            h = random.choice(range(256, 641, 32)); w = random.choice(range(256, 641, 32))
            x = torch.randn(b, 3, h, w, device=dev)
            y = torch.randint(0, 21, (b, h, w), device=dev)
            loss = torch.nn.functional.cross_entropy(m(x)["out"], y)
            optimizer_step(loss, opt)
    elif name == "falcon_generate_varprompt":
        # Falcon-like decoder (multi-query attention, parallel attention and MLP, 16 layers,
        # d 1024, 16 heads, vocabulary 65,024), bf16, greedy generation of 32 tokens for six
        # (batch, prompt) shapes.
        from transformers import FalconConfig, FalconForCausalLM
        cfg = FalconConfig(hidden_size=1024, num_hidden_layers=16, num_attention_heads=16, vocab_size=65024)
        m = FalconForCausalLM(cfg).to(dev, dtype=torch.bfloat16).eval()
        shapes = [(6, 120), (1, 1000), (16, 50), (4, 400), (10, 250), (2, 1500)]
        generate_fixed(m, dev, capped(shapes), vocab=65000, new_tokens=32, pad_token_id=11)
    elif name == "pegasus_summarize_varbatch":
        # Pegasus-like summarizer (6+6 layers, d 512, 8 heads, FFN 2,048, vocabulary 96,103),
        # fp32, greedy generation of 48 tokens for six (batch, source length) shapes.
        from transformers import PegasusConfig, PegasusForConditionalGeneration
        cfg = PegasusConfig(d_model=512, encoder_layers=6, decoder_layers=6, encoder_ffn_dim=2048,
                            decoder_ffn_dim=2048, encoder_attention_heads=8, decoder_attention_heads=8,
                            vocab_size=96103)
        m = PegasusForConditionalGeneration(cfg).to(dev).eval()
        shapes = [(24, 60), (2, 480), (48, 30), (1, 900), (12, 200), (6, 100)]
        generate_fixed(m, dev, capped(shapes), vocab=96000, new_tokens=48)
    elif name == "embbag_recsys_varbatch_infer":
        # A DLRM-like recommender: 8 embedding-bag tables (200,000 x 64, sum), a bottom MLP on 13
        # dense features (256, 64), a top MLP on the concatenation (512, 256, 1); fp32, no grad;
        # 40 batches of 128-8,192 samples, each table's bags 1-40 indices long (one length per
        # table and batch).
        tables = torch.nn.ModuleList(torch.nn.EmbeddingBag(200000, 64, mode="sum") for _ in range(8)).to(dev)
        bottom = torch.nn.Sequential(torch.nn.Linear(13, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64),
                                     torch.nn.ReLU()).to(dev)
        top = torch.nn.Sequential(torch.nn.Linear(64 * 9, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                                  torch.nn.ReLU(), torch.nn.Linear(256, 1)).to(dev)
        with torch.no_grad():
            for step in steps(40):
                b = random.randint(128, 8192)
                feats = [bottom(torch.randn(b, 13, device=dev))]
                for t in tables:
                    n = random.randint(1, 40)
                    idx = torch.randint(0, 200000, (b * n,), device=dev)
                    off = torch.arange(0, b * n, n, device=dev)
                    feats.append(t(idx, off))
                torch.sigmoid(top(torch.cat(feats, dim=1)))
    elif name == "tcn_ctc_varlen_train":
        # A temporal convolutional network for speech-like input: 80 features in, ten residual
        # blocks of dilated Conv1d (512 channels, kernel 3, dilation 1-16) with batch norm, a
        # linear layer to 32 symbols, CTC loss against random targets; Adam, fp32; 24 steps of
        # batch 8-48 x 200-1,600 frames, targets 20-120 symbols.
        class Block(torch.nn.Module):
            def __init__(self, d):
                super().__init__()
                self.conv = torch.nn.Conv1d(512, 512, 3, padding=d, dilation=d)
                self.norm = torch.nn.BatchNorm1d(512)
            def forward(self, x):
                return x + torch.relu(self.norm(self.conv(x)))
        class Tcn(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inp = torch.nn.Conv1d(80, 512, 1)
                self.blocks = torch.nn.Sequential(*[Block(2 ** (i % 5)) for i in range(10)])
                self.out = torch.nn.Linear(512, 32)
            def forward(self, x):
                return self.out(self.blocks(self.inp(x)).transpose(1, 2))
        m = Tcn().to(dev).train()
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        for step in steps(24):
            b = random.randint(8, 48); t = random.randint(200, 1600); s = random.randint(20, 120)
            x = torch.randn(b, 80, t, device=dev)
            logp = m(x).log_softmax(-1).transpose(0, 1)
            targets = torch.randint(1, 32, (b, s), device=dev)
            loss = torch.nn.functional.ctc_loss(
                logp, targets, torch.full((b,), t, dtype=torch.long), torch.full((b,), s, dtype=torch.long))
            optimizer_step(loss, opt)
    elif name == "modernbert_varlen_infer":
        # ModernBERT-base-like encoder (22 layers, d 768, 12 heads, alternating local and global
        # attention, vocabulary 50,368), bf16, no grad; 30 batches of random batch 1-64 x length
        # 16-1,024.
        from transformers import ModernBertConfig, ModernBertModel
        cfg = ModernBertConfig(hidden_size=768, num_hidden_layers=22, num_attention_heads=12,
                               intermediate_size=1152, vocab_size=50368)
        m = ModernBertModel(cfg).to(dev, dtype=torch.bfloat16).eval()
        infer_random_tokens(m, dev, 30 if not CAP else CAP, (1, 64), (16, 1024), 50000)
    else:
        raise SystemExit("unknown workload " + name)
    if dev.type == "cuda":
        torch.cuda.synchronize()

if __name__ == "__main__":
    record_main(run)
