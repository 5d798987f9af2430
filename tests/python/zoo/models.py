"""Small configurations of real library models, with random weights and no downloads.

Each entry builds a model as its library ships it (dropout on, `use_cache` and every other
option at the config's default), a batch for it, and the loss a training loop would take. The
sizes are small enough for a CPU test (hidden 64-128, 2-4 blocks, sequences of 32), but the
code is the libraries' own: Hugging Face's masks, rotary embeddings passed as keyword tuples,
caches, tuple outputs; timm's stochastic depth and layer scale; torchvision's residual stages.

torchvision_cpu is imported first: torchvision's PyPI wheel for torch 2.13 is a CUDA build,
and transformers imports torchvision when it is installed (see that module).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from . import torchvision_cpu  # noqa: F401  (before torchvision and transformers)

VOCAB = 512
SEQ = 32
BATCH = 2


@dataclass(frozen=True)
class ZooModel:
    name: str
    library: str
    build: Callable[[str], nn.Module]  # attn_implementation -> model (ignored outside HF)
    batch: Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]
    loss: Callable[[Any], torch.Tensor]
    decoder: bool = False  # a causal LM, for the comparisons with HF's own checkpointing
    attention: tuple[str, ...] = ("sdpa", "eager")


def _tokens(generator_seed: int = 0) -> tuple[tuple[Any, ...], dict[str, Any]]:
    g = torch.Generator().manual_seed(generator_seed)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    return (ids,), {"labels": ids}


def _padded_tokens() -> tuple[tuple[Any, ...], dict[str, Any]]:
    (ids,), kwargs = _tokens(1)
    mask = torch.ones_like(ids)
    mask[1, -5:] = 0  # a padded row: the attention mask matters
    return (ids,), {"attention_mask": mask, "labels": ids}


def _seq2seq() -> tuple[tuple[Any, ...], dict[str, Any]]:
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    labels = torch.randint(0, VOCAB, (BATCH, SEQ // 2), generator=g)
    return (ids,), {"labels": labels}


def _images(size: int) -> Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]:
    def batch() -> tuple[tuple[Any, ...], dict[str, Any]]:
        g = torch.Generator().manual_seed(3)
        return (torch.randn(BATCH, 3, size, size, generator=g),), {}

    return batch


def _hf_loss(output: Any) -> torch.Tensor:
    return output.loss


def _image_loss(output: torch.Tensor) -> torch.Tensor:
    return output.float().logsumexp(-1).mean()


def _hf(config_class: str, model_class: str, **config: Any) -> Callable[[str], nn.Module]:
    def build(attention: str) -> nn.Module:
        import transformers

        cfg = getattr(transformers, config_class)(**config)
        cfg._attn_implementation = attention
        return getattr(transformers, model_class)(cfg).train()

    return build


_DECODER = dict(
    vocab_size=VOCAB,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2 * SEQ,
)


def _vit(_: str) -> nn.Module:
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer(
        img_size=32,
        patch_size=8,
        embed_dim=64,
        depth=4,
        num_heads=2,
        num_classes=10,
        drop_rate=0.1,
        drop_path_rate=0.1,
        init_values=1e-5,  # layer scale
    ).train()


def _convnext(_: str) -> nn.Module:
    from timm.models.convnext import ConvNeXt

    return ConvNeXt(
        depths=(1, 1, 2, 1), dims=(16, 32, 48, 64), num_classes=10, drop_path_rate=0.1
    ).train()


def _resnet(_: str) -> nn.Module:
    from torchvision.models.resnet import BasicBlock, ResNet

    return ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10, width_per_group=64).train()


ZOO: dict[str, ZooModel] = {
    m.name: m
    for m in [
        ZooModel(
            "llama",
            "transformers",
            _hf("LlamaConfig", "LlamaForCausalLM", **_DECODER),
            _padded_tokens,
            _hf_loss,
            decoder=True,
        ),
        ZooModel(
            "qwen2",
            "transformers",
            _hf("Qwen2Config", "Qwen2ForCausalLM", **_DECODER),
            _tokens,
            _hf_loss,
            decoder=True,
        ),
        ZooModel(
            "mixtral",
            "transformers",
            _hf(
                "MixtralConfig",
                "MixtralForCausalLM",
                num_local_experts=4,
                num_experts_per_tok=2,
                **_DECODER,
            ),
            _tokens,
            _hf_loss,
            decoder=True,
        ),
        ZooModel(
            "gpt2",
            "transformers",
            _hf(
                "GPT2Config",
                "GPT2LMHeadModel",
                vocab_size=VOCAB,
                n_positions=2 * SEQ,
                n_embd=128,
                n_layer=3,
                n_head=4,
            ),
            _padded_tokens,
            _hf_loss,
            decoder=True,
        ),
        ZooModel(
            "bert",
            "transformers",
            _hf(
                "BertConfig",
                "BertForMaskedLM",
                vocab_size=VOCAB,
                hidden_size=128,
                num_hidden_layers=3,
                num_attention_heads=4,
                intermediate_size=256,
                max_position_embeddings=2 * SEQ,
            ),
            _padded_tokens,
            _hf_loss,
        ),
        ZooModel(
            "t5",
            "transformers",
            _hf(
                "T5Config",
                "T5ForConditionalGeneration",
                vocab_size=VOCAB,
                d_model=128,
                d_kv=32,
                d_ff=256,
                num_layers=2,
                num_decoder_layers=2,
                num_heads=4,
                decoder_start_token_id=0,
                pad_token_id=0,
            ),
            _seq2seq,
            _hf_loss,
        ),
        ZooModel("vit", "timm", _vit, _images(32), _image_loss, attention=("default",)),
        ZooModel("convnext", "timm", _convnext, _images(32), _image_loss, attention=("default",)),
        ZooModel(
            "resnet", "torchvision", _resnet, _images(32), _image_loss, attention=("default",)
        ),
    ]
}
