# Variable-shape workloads for the allocation policy (issue 27), recorded with
# ../shared/gpu/record_trace.py's machinery on the H200. Split before any policy work:
#   design:     gpt2_varlen_infer, resnet50_varres_infer, lstm_packed_train, llama_generate_varprompt
#   validation: bert_fp16_varlen_infer, fasterrcnn_varsize_infer, t5_generate_varbatch, vit_varbatch_infer
#   held out:   bart_generate_varbatch, mobilenet_varres_infer, retinanet_varsize_infer,
#               roberta_varlen_train (recorded 2026-12-03 19:20 UTC into heldout/, after both sets
#               above had been looked at: a fresh validation set, not yet looked at)
#   held out 2: deeplab_varres_infer, maskrcnn_varsize_infer, opt_generate_varprompt,
#               gpt2_varlen_train (recorded 2026-12-04 into heldout2/, for the round after the
#               one that looks at heldout/)
#   held out 3: unet_varres_infer, convnext_varres_infer, fcos_varsize_infer, gru_packed_infer,
#               mistral_generate_varbatch, efficientnet_varres_train (recorded 2026-12-04 16:06 UTC
#               into heldout3/, before the fifth round's rules were written)
#   held out 4: swin_varres_infer, densenet_varres_train, audio_encoder_varlen_infer,
#               lstm_seq2seq_varlen_train, keypointrcnn_varsize_infer, gptneox_generate_varbatch
#               (recorded 2026-12-04 16:40 UTC into heldout4/, after heldout3/ had been judged and
#               before any rule designed on it was final)
#   held out 5: electra_mlm_varlen_infer, debertav2_varlen_infer, qwen2_generate_varprompt,
#               fcn_varsize_infer, regnet_varres_train, transformer_seq2seq_varlen_train
#               (recorded 2026-12-04 18:33 UTC into heldout5/, after heldout3/ and heldout4/ had
#               been judged, before any relocation rule beyond `merge` was final)
# The validation traces are judged once, at the end; no rule is tuned on them.
import os, random, sys, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from workload_steps import (detect_untrained, generate_fixed, infer_random_images, infer_random_tokens,
                            optimizer_step, record_main, seeded_cuda)

def unet(dev, width=48):
    """A four-level U-Net (convolutions, max-pool down, transposed-convolution up, skip concatenation)."""
    nn = torch.nn
    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(),
                             nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())
    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            c = [width * 2 ** k for k in range(5)]
            self.down = nn.ModuleList([block(3, c[0])] + [block(c[k], c[k + 1]) for k in range(4)])
            self.up = nn.ModuleList([nn.ConvTranspose2d(c[k + 1], c[k], 2, stride=2) for k in range(4)])
            self.dec = nn.ModuleList([block(2 * c[k], c[k]) for k in range(4)])
            self.out = nn.Conv2d(c[0], 21, 1)
        def forward(self, x):
            skips = []
            for k, d in enumerate(self.down):
                x = d(x if k == 0 else torch.nn.functional.max_pool2d(x, 2))
                skips.append(x)
            for k in reversed(range(4)):
                x = self.dec[k](torch.cat([self.up[k](x), skips[k]], 1))
            return self.out(x)
    return UNet().to(dev)

def run(name):
    dev = seeded_cuda()
    if name == "gpt2_varlen_infer":
        from transformers import GPT2Config, GPT2Model
        m = GPT2Model(GPT2Config()).to(dev).eval()
        infer_random_tokens(m, dev, 40, batch=(1, 32), seq=(16, 1024), vocab=50257)
    elif name == "resnet50_varres_infer":
        import torchvision
        m = torchvision.models.resnet50().to(dev).eval()
        infer_random_images(m, dev, 30, batch=(1, 64), resolutions=range(128, 417, 32))
    elif name == "lstm_packed_train":
        from torch.nn.utils.rnn import pack_padded_sequence
        rnn = torch.nn.LSTM(256, 512, num_layers=2, batch_first=True).to(dev)
        head = torch.nn.Linear(512, 10).to(dev)
        opt = torch.optim.Adam(list(rnn.parameters()) + list(head.parameters()), lr=1e-3)
        for step in range(20):
            b = random.randint(8, 64); lens = sorted([random.randint(5, 300) for _ in range(b)], reverse=True)
            x = torch.randn(b, lens[0], 256, device=dev)
            packed = pack_padded_sequence(x, torch.tensor(lens), batch_first=True)
            _, (h, _) = rnn(packed)
            loss = torch.nn.functional.cross_entropy(head(h[-1]), torch.randint(0, 10, (b,), device=dev))
            optimizer_step(loss, opt)
    elif name == "llama_generate_varprompt":
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(hidden_size=768, intermediate_size=2048, num_hidden_layers=6, num_attention_heads=12, num_key_value_heads=4, vocab_size=32000)
        m = LlamaForCausalLM(cfg).to(dev, dtype=torch.bfloat16).eval()
        generate_fixed(m, dev, [(2, 40), (16, 200), (1, 700), (8, 64)], vocab=32000, new_tokens=48, pad_token_id=0)
    elif name == "bert_fp16_varlen_infer":
        from transformers import BertConfig, BertModel
        m = BertModel(BertConfig()).to(dev, dtype=torch.float16).eval()
        infer_random_tokens(m, dev, 50, batch=(1, 48), seq=(8, 512), vocab=30000)
    elif name == "fasterrcnn_varsize_infer":
        detect_untrained("fasterrcnn_resnet50_fpn", dev, 12, images=(1, 4), side=(300, 900))
    elif name == "t5_generate_varbatch":
        from transformers import T5Config, T5ForConditionalGeneration
        m = T5ForConditionalGeneration(T5Config(num_layers=6, d_model=512, d_ff=2048, num_heads=8)).to(dev).eval()
        generate_fixed(m, dev, [(4, 128), (32, 48), (1, 500), (12, 256)], vocab=32000, new_tokens=40,
                       decoder_start_token_id=0, pad_token_id=0)
    elif name == "vit_varbatch_infer":
        import torchvision
        m = torchvision.models.vit_b_16().to(dev).eval()
        with torch.no_grad():
            for i in range(30):
                b = random.randint(1, 96)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    m(torch.randn(b, 3, 224, 224, device=dev))
    elif name == "bart_generate_varbatch":
        from transformers import BartConfig, BartForConditionalGeneration
        cfg = BartConfig(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                         decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048)
        m = BartForConditionalGeneration(cfg).to(dev).eval()
        generate_fixed(m, dev, [(8, 300), (1, 900), (24, 64), (4, 512)], vocab=50000, new_tokens=32,
                       decoder_start_token_id=2, pad_token_id=1)
    elif name == "mobilenet_varres_infer":
        import torchvision
        m = torchvision.models.mobilenet_v3_large().to(dev).eval()
        infer_random_images(m, dev, 40, batch=(1, 128), resolutions=range(96, 481, 16))
    elif name == "retinanet_varsize_infer":
        detect_untrained("retinanet_resnet50_fpn", dev, 12, images=(1, 6), side=(256, 1024))
    elif name == "roberta_varlen_train":
        from transformers import RobertaConfig, RobertaForSequenceClassification
        m = RobertaForSequenceClassification(RobertaConfig(num_hidden_layers=6, num_labels=4)).to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        for step in range(25):
            b = random.randint(2, 32); s = random.randint(16, 512)
            out = m(torch.randint(3, 30000, (b, s), device=dev), labels=torch.randint(0, 4, (b,), device=dev))
            optimizer_step(out.loss, opt)
    elif name == "deeplab_varres_infer":
        import torchvision
        m = torchvision.models.segmentation.deeplabv3_resnet50(weights=None, weights_backbone=None).to(dev).eval()
        infer_random_images(m, dev, 24, batch=(1, 16), resolutions=range(192, 641, 64))
    elif name == "maskrcnn_varsize_infer":
        detect_untrained("maskrcnn_resnet50_fpn", dev, 10, images=(1, 5), side=(320, 960))
    elif name == "opt_generate_varprompt":
        from transformers import OPTConfig, OPTForCausalLM
        cfg = OPTConfig(hidden_size=768, ffn_dim=3072, num_hidden_layers=8, num_attention_heads=12, vocab_size=50272)
        m = OPTForCausalLM(cfg).to(dev, dtype=torch.float16).eval()
        generate_fixed(m, dev, [(6, 120), (1, 800), (20, 32), (3, 400)], vocab=50000, new_tokens=40, pad_token_id=1)
    elif name == "gpt2_varlen_train":
        from transformers import GPT2Config, GPT2LMHeadModel
        m = GPT2LMHeadModel(GPT2Config(n_layer=6)).to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        for step in range(20):
            b = random.randint(1, 16); s = random.randint(32, 1024)
            ids = torch.randint(0, 50257, (b, s), device=dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = m(ids, labels=ids)
            optimizer_step(out.loss, opt)
    elif name == "unet_varres_infer":
        m = unet(dev).eval()
        infer_random_images(m, dev, 30, batch=(1, 8), resolutions=range(128, 513, 64))
    elif name == "convnext_varres_infer":
        import torchvision
        m = torchvision.models.convnext_tiny().to(dev).eval()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            infer_random_images(m, dev, 40, batch=(1, 48), resolutions=range(160, 385, 32))
    elif name == "fcos_varsize_infer":
        detect_untrained("fcos_resnet50_fpn", dev, 12, images=(1, 4), side=(320, 1024))
    elif name == "gru_packed_infer":
        from torch.nn.utils.rnn import pack_padded_sequence
        emb = torch.nn.Embedding(20000, 384).to(dev)
        rnn = torch.nn.GRU(384, 768, num_layers=2, bidirectional=True, batch_first=True).to(dev).eval()
        with torch.no_grad():
            for step in range(30):
                b = random.randint(4, 128); lens = sorted([random.randint(8, 400) for _ in range(b)], reverse=True)
                x = emb(torch.randint(0, 20000, (b, lens[0]), device=dev))
                rnn(pack_padded_sequence(x, torch.tensor(lens), batch_first=True))
    elif name == "mistral_generate_varbatch":
        from transformers import MistralConfig, MistralForCausalLM
        cfg = MistralConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=6, num_attention_heads=16,
                            num_key_value_heads=4, vocab_size=32000, sliding_window=None)
        m = MistralForCausalLM(cfg).to(dev, dtype=torch.float16).eval()
        generate_fixed(m, dev, [(12, 96), (2, 600), (32, 40), (5, 300)], vocab=32000, new_tokens=48, pad_token_id=0)
    elif name == "efficientnet_varres_train":
        import torchvision
        m = torchvision.models.efficientnet_b0(num_classes=100).to(dev)
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        for step in range(16):
            b = random.randint(8, 64); r = random.choice(range(128, 321, 32))
            loss = torch.nn.functional.cross_entropy(m(torch.randn(b, 3, r, r, device=dev)),
                                                     torch.randint(0, 100, (b,), device=dev))
            optimizer_step(loss, opt)
    elif name == "swin_varres_infer":
        import torchvision
        m = torchvision.models.swin_t().to(dev).eval()
        with torch.autocast("cuda", dtype=torch.float16):
            infer_random_images(m, dev, 30, batch=(1, 32), resolutions=range(224, 417, 32))
    elif name == "densenet_varres_train":
        import torchvision
        m = torchvision.models.densenet121(num_classes=50).to(dev)
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        for step in range(14):
            b = random.randint(4, 32); r = random.choice(range(128, 289, 32))
            loss = torch.nn.functional.cross_entropy(m(torch.randn(b, 3, r, r, device=dev)),
                                                     torch.randint(0, 50, (b,), device=dev))
            optimizer_step(loss, opt)
    elif name == "audio_encoder_varlen_infer":
        nn = torch.nn
        stem = nn.Sequential(nn.Conv1d(80, 512, 3, padding=1), nn.GELU(), nn.Conv1d(512, 512, 3, stride=2, padding=1), nn.GELU()).to(dev)
        enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True), 6).to(dev).eval()
        with torch.no_grad():
            for step in range(30):
                b = random.randint(1, 24); frames = random.randint(200, 3000)
                enc(stem(torch.randn(b, 80, frames, device=dev)).transpose(1, 2))
    elif name == "lstm_seq2seq_varlen_train":
        nn = torch.nn
        emb = nn.Embedding(16000, 256).to(dev)
        encoder = nn.LSTM(256, 512, num_layers=2, batch_first=True).to(dev)
        decoder = nn.LSTM(256, 512, num_layers=2, batch_first=True).to(dev)
        head = nn.Linear(512, 16000).to(dev)
        params = [p for mod in (emb, encoder, decoder, head) for p in mod.parameters()]
        opt = torch.optim.Adam(params, lr=1e-3)
        for step in range(20):
            b = random.randint(8, 64); s = random.randint(10, 200); t = random.randint(10, 120)
            _, state = encoder(emb(torch.randint(0, 16000, (b, s), device=dev)))
            y = torch.randint(0, 16000, (b, t), device=dev)
            out, _ = decoder(emb(y), state)
            loss = torch.nn.functional.cross_entropy(head(out).flatten(0, 1), y.flatten())
            optimizer_step(loss, opt)
    elif name == "keypointrcnn_varsize_infer":
        detect_untrained("keypointrcnn_resnet50_fpn", dev, 10, images=(1, 4), side=(320, 960))
    elif name == "gptneox_generate_varbatch":
        from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
        cfg = GPTNeoXConfig(hidden_size=768, intermediate_size=3072, num_hidden_layers=8, num_attention_heads=12, vocab_size=50304)
        m = GPTNeoXForCausalLM(cfg).to(dev, dtype=torch.float16).eval()
        generate_fixed(m, dev, [(16, 64), (3, 500), (40, 24), (7, 250)], vocab=50000, new_tokens=40, pad_token_id=0)
    elif name == "electra_mlm_varlen_infer":
        from transformers import ElectraConfig, ElectraForMaskedLM
        cfg = ElectraConfig(vocab_size=30522, embedding_size=768, hidden_size=256, num_hidden_layers=12,
                            num_attention_heads=4, intermediate_size=1024)
        m = ElectraForMaskedLM(cfg).to(dev).eval()
        infer_random_tokens(m, dev, 45, batch=(1, 48), seq=(8, 512), vocab=30522)
    elif name == "debertav2_varlen_infer":
        from transformers import DebertaV2Config, DebertaV2Model
        cfg = DebertaV2Config(vocab_size=128100, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                              intermediate_size=3072, relative_attention=True, position_biased_input=False,
                              pos_att_type=["p2c", "c2p"], max_relative_positions=-1, position_buckets=256,
                              norm_rel_ebd="layer_norm", share_att_key=True)
        m = DebertaV2Model(cfg).to(dev).eval()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            infer_random_tokens(m, dev, 36, batch=(1, 32), seq=(16, 512), vocab=128000)
    elif name == "qwen2_generate_varprompt":
        from transformers import Qwen2Config, Qwen2ForCausalLM
        cfg = Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=8, num_attention_heads=14,
                          num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True)
        m = Qwen2ForCausalLM(cfg).to(dev, dtype=torch.float16).eval()
        generate_fixed(m, dev, [(10, 150), (1, 1000), (28, 48), (4, 420)], vocab=151000, new_tokens=44, pad_token_id=0)
    elif name == "fcn_varsize_infer":
        import torchvision
        m = torchvision.models.segmentation.fcn_resnet50(weights=None, weights_backbone=None, aux_loss=True).to(dev).eval()
        with torch.no_grad():
            for step in range(24):
                b = random.randint(1, 10); h = random.choice(range(224, 705, 32)); w = random.choice(range(224, 705, 32))
                m(torch.randn(b, 3, h, w, device=dev))
    elif name == "regnet_varres_train":
        import torchvision
        m = torchvision.models.regnet_y_1_6gf(num_classes=200).to(dev)
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-5)
        for step in range(16):
            b = random.randint(8, 64); r = random.choice(range(128, 321, 32))
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(m(torch.randn(b, 3, r, r, device=dev)),
                                                         torch.randint(0, 200, (b,), device=dev))
            optimizer_step(loss, opt)
    elif name == "transformer_seq2seq_varlen_train":
        nn = torch.nn
        vocab, d = 24000, 512
        emb = nn.Embedding(vocab, d, padding_idx=0).to(dev)
        pos = nn.Embedding(512, d).to(dev)
        core = nn.Transformer(d, 8, num_encoder_layers=4, num_decoder_layers=4, dim_feedforward=2048,
                              batch_first=True).to(dev)
        head = nn.Linear(d, vocab).to(dev)
        params = [p for mod in (emb, pos, core, head) for p in mod.parameters()]
        opt = torch.optim.AdamW(params, lr=3e-4)
        def tokens(lens):
            x = torch.randint(1, vocab, (len(lens), max(lens)), device=dev)
            pad = torch.arange(max(lens), device=dev)[None, :] >= torch.tensor(lens, device=dev)[:, None]
            return x.masked_fill(pad, 0), pad
        def embed(x):
            return emb(x) + pos(torch.arange(x.shape[1], device=dev))[None]
        for step in range(24):
            b = random.randint(8, 64)
            src, src_pad = tokens([random.randint(10, 256) for _ in range(b)])
            tgt, tgt_pad = tokens([random.randint(10, 160) for _ in range(b)])
            t = tgt.shape[1] - 1
            causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=dev), 1)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = core(embed(src), embed(tgt[:, :-1]), tgt_mask=causal, src_key_padding_mask=src_pad,
                           tgt_key_padding_mask=tgt_pad[:, :-1], memory_key_padding_mask=src_pad)
                logits = head(out)
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=0)
            optimizer_step(loss, opt)
    else:
        raise SystemExit("unknown workload " + name)
    torch.cuda.synchronize()

if __name__ == "__main__":
    record_main(run)
