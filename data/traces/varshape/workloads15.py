# A fifteenth held-out set of variable-shape workloads for the allocation policy (issue 27),
# to be recorded with ../shared/gpu/record_trace.py's machinery by record6.sh
# (SCRIPT=workloads15.py) into a folder outside the repository:
#   held out 15: esm_varlen_infer, mamba_varlen_infer, poolformer_varres_infer,
#                convbert_mlm_varlen_train, phi3_generate_varbatch,
#                retinanet_v2_varsize_train, m2m100_translate_varbatch
# None of these architectures is in workloads.py or workloads6.py to workloads14.py (the
# RetinaNet of workloads.py is the first version and ran inference only; this one is v2 and
# trains). They were written on 2026-12-06 (about 14:50 UTC), before the sixteenth round wrote
# any rule; the round fixes the test that judges them (in README.md) before recording them,
# records them before reading any of their figures and keeps the recordings outside the
# repository, unseen, until its candidate is final. Not run before commit (no PyTorch on the
# build machine): a check run first (W15_MAX_STEPS=1, its figures not read) finds API
# mistakes; a workload that fails it is left out of the recording and said so.
# Every model is built from a config with random weights (no pretrained weights, no network);
# every run is seeded with seeded_cuda(). Step counts keep each history well under the
# recorder's 5,000,000 entries. W15_MAX_STEPS=N (a check run only, never a recording) caps
# every loop.
import os, random, sys, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from workload_steps import (generate_fixed, infer_random_images, infer_random_tokens,
                            optimizer_step, record_main, seeded_cuda, step_limits)

steps, capped = step_limits("W15_MAX_STEPS")

def run(name):
    dev = seeded_cuda()
    if name == "esm_varlen_infer":
        # ESM-2-like protein encoder (12 layers, d 480, 20 heads, FFN 1,920, rotary
        # positions, vocabulary 33), fp32, no grad; 40 batches of random batch 1-32 x length
        # 32-1,024.
        from transformers import EsmConfig, EsmModel
        cfg = EsmConfig(vocab_size=33, hidden_size=480, num_hidden_layers=12,
                        num_attention_heads=20, intermediate_size=1920,
                        position_embedding_type="rotary", max_position_embeddings=1026,
                        pad_token_id=1, mask_token_id=32)
        m = EsmModel(cfg, add_pooling_layer=False).to(dev).eval()
        infer_random_tokens(m, dev, len(steps(40)), (1, 32), (32, 1024), 33)
    elif name == "mamba_varlen_infer":
        # Mamba-like state-space encoder (12 layers, d 512, state 16, vocabulary 32,000; the
        # selective scan of transformers' PyTorch path), fp32, no grad; 25 batches of random
        # batch 1-16 x length 32-768.
        from transformers import MambaConfig, MambaModel
        cfg = MambaConfig(vocab_size=32000, hidden_size=512, num_hidden_layers=12,
                          state_size=16, use_mambapy=False)
        m = MambaModel(cfg).to(dev).eval()
        infer_random_tokens(m, dev, len(steps(25)), (1, 16), (32, 768), 32000)
    elif name == "poolformer_varres_infer":
        # PoolFormer-S12 (default config: pooling token mixers), fp32, no grad; 30 batches
        # of random batch 1-64 at 128-512 x 128-512 (steps of 32, square).
        from transformers import PoolFormerConfig, PoolFormerModel
        m = PoolFormerModel(PoolFormerConfig()).to(dev).eval()
        infer_random_images(m, dev, len(steps(30)), (1, 64), list(range(128, 513, 32)))
    elif name == "convbert_mlm_varlen_train":
        # ConvBERT-base-like masked-LM (12 layers, d 768, span-based dynamic convolutions,
        # head ratio 2, vocabulary 30,522), AdamW, bf16 autocast; 30 steps of batch 4-32 x
        # length 32-512, random tokens and labels.
        from transformers import ConvBertConfig, ConvBertForMaskedLM
        m = ConvBertForMaskedLM(ConvBertConfig()).to(dev).train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        for step in steps(30):
            b = random.randint(4, 32); s = random.randint(32, 512)
            x = torch.randint(0, 30000, (b, s), device=dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = m(input_ids=x, labels=x).loss
            optimizer_step(loss, opt)
    elif name == "phi3_generate_varbatch":
        # Phi-3-like decoder (8 layers, d 1,024, 16 heads, 8 key-value heads, FFN 4,096,
        # fused projections, vocabulary 32,064), fp16, greedy generation of 32 tokens for six
        # (batch, prompt) shapes.
        from transformers import Phi3Config, Phi3ForCausalLM
        cfg = Phi3Config(vocab_size=32064, hidden_size=1024, num_hidden_layers=8,
                         num_attention_heads=16, num_key_value_heads=8, intermediate_size=4096,
                         max_position_embeddings=4096, pad_token_id=0)
        m = Phi3ForCausalLM(cfg).to(dev, dtype=torch.float16).eval()
        shapes = [(24, 64), (2, 1200), (48, 20), (1, 2500), (12, 300), (6, 700)]
        generate_fixed(m, dev, capped(shapes), vocab=32000, new_tokens=32, pad_token_id=0)
    elif name == "retinanet_v2_varsize_train":
        # RetinaNet v2 (torchvision, ResNet-50 FPN v2 backbone, no pretrained weights), SGD
        # with momentum, fp32; 16 steps of 1-4 images of 320-832 x 320-832, each with 1-8
        # random boxes of 91 classes.
        import torchvision
        m = torchvision.models.detection.retinanet_resnet50_fpn_v2(
            weights=None, weights_backbone=None).to(dev).train()
        opt = torch.optim.SGD(m.parameters(), lr=0.005, momentum=0.9)
        for step in steps(16):
            images, targets = [], []
            for _ in range(random.randint(1, 4)):
                h = random.randint(320, 832); w = random.randint(320, 832)
                images.append(torch.rand(3, h, w, device=dev))
                n = random.randint(1, 8)
                xy = torch.rand(n, 2, device=dev) * torch.tensor([w * 0.7, h * 0.7], device=dev)
                wh = 16 + torch.rand(n, 2, device=dev) * torch.tensor([w * 0.3, h * 0.3], device=dev)
                targets.append({"boxes": torch.cat([xy, xy + wh], dim=1),
                                "labels": torch.randint(1, 91, (n,), device=dev)})
            losses = m(images, targets)
            optimizer_step(sum(losses.values()), opt)
    elif name == "m2m100_translate_varbatch":
        # M2M100-like encoder-decoder (6 + 6 layers, d 512, 8 heads, FFN 2,048, sinusoidal
        # positions, vocabulary 64,000), fp16, greedy generation of 36 tokens for six (batch,
        # source length) shapes.
        from transformers import M2M100Config, M2M100ForConditionalGeneration
        cfg = M2M100Config(vocab_size=64000, d_model=512, encoder_layers=6, decoder_layers=6,
                           encoder_attention_heads=8, decoder_attention_heads=8,
                           encoder_ffn_dim=2048, decoder_ffn_dim=2048,
                           max_position_embeddings=1024)
        m = M2M100ForConditionalGeneration(cfg).to(dev, dtype=torch.float16).eval()
        shapes = [(16, 96), (2, 800), (64, 24), (1, 1000), (8, 300), (32, 48)]
        generate_fixed(m, dev, capped(shapes), vocab=63000, new_tokens=36,
                       decoder_start_token_id=2, pad_token_id=1)
    else:
        raise SystemExit("unknown workload " + name)

if __name__ == "__main__":
    record_main(run)
