"""Tiny configs for every transformers causal-LM model type, for bench/hf_sweep.py: a generic
builder that shrinks every size field it knows, and the per-type overrides it cannot guess."""

from __future__ import annotations

NL = 4  # layers
H = 64  # hidden
NH = 4  # heads
NKV = 2  # kv heads
HD = 16  # head dim
FF = 128  # intermediate
VOCAB = 256
POS = 128

SKIP_KEYS = {
    "id2label",
    "label2id",
    "rope_parameters",
    "rope_scaling",
    "quantization_config",
    "task_specific_params",
    "time_step_limit",
}

EXACT = {
    # hidden
    "hidden_size": H,
    "n_embd": H,
    "d_model": H,
    "dim": H,
    "embed_dim": H,
    "n_embed": H,
    "hidden_dim": H,
    "word_embed_proj_dim": H,
    "embedding_size": H,
    "emb_dim": H,
    # layers
    "num_hidden_layers": NL,
    "n_layer": NL,
    "num_layers": NL,
    "n_layers": NL,
    "decoder_layers": NL,
    "encoder_layers": NL,
    "num_decoder_layers": NL,
    "num_encoder_layers": NL,
    # heads
    "num_attention_heads": NH,
    "n_head": NH,
    "num_heads": NH,
    "n_heads": NH,
    "encoder_attention_heads": NH,
    "decoder_attention_heads": NH,
    "num_key_value_heads": NKV,
    "num_kv_heads": NKV,
    "n_kv_heads": NKV,
    "multi_query_group_num": NKV,
    "num_key_value_groups": None,
    "head_dim": HD,
    "d_kv": HD,
    "attention_head_dim": HD,
    "kv_channels": HD,
    # ff
    "intermediate_size": FF,
    "ffn_dim": FF,
    "n_inner": FF,
    "encoder_ffn_dim": FF,
    "decoder_ffn_dim": FF,
    "d_ff": FF,
    "ffn_hidden_size": FF,
    "d_inner": FF,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "expert_intermediate_size": 32,
    "moe_ffn_hidden_size": 32,
    # experts
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "moe_num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_topk": 2,
    "top_k": 2,
    "moe_k": 2,
    "n_shared_experts": 1,
    "num_shared_experts": 1,
    "n_group": 1,
    "topk_group": 1,
    # vocab / positions
    "vocab_size": VOCAB,
    "max_position_embeddings": POS,
    "n_positions": POS,
    "n_ctx": POS,
    "max_seq_len": POS,
    "seq_length": POS,
    "max_sequence_length": POS,
    # MLA
    "kv_lora_rank": 16,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    "qk_head_dim": 16,
    # ssm
    "state_size": 16,
    "mamba_d_state": 16,
    "ssm_state_size": 16,
    "time_step_rank": 8,
    "mamba_dt_rank": 8,
    "n_groups": 1,
    "mamba_n_groups": 1,
    "chunk_size": 16,
    "mamba_chunk_size": 16,
    # linear attention
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    # misc
    "first_k_dense_replace": 1,
    "num_nextn_predict_layers": 0,
    "num_expert_group": 1,
    "num_experts_per_token": 2,
    "index_topk": 8,
    "index_head_dim": 16,
    "index_n_heads": 2,
    "vocab_size_per_layer_input": VOCAB,
    "num_kv_shared_layers": 2,
    "rotary_dim": 8,
    "laurel_rank": 8,
    "linear_head_dim": 16,
    "linear_num_heads": 4,
    "zero_expert_num": 2,
    "index_num_heads": 2,
    "hc_lowrank": 16,
}
NONE_FILL_SKIP = {
    "q_lora_rank",
    "kv_lora_rank",
    "num_key_value_groups",
    "rotary_dim",
    "first_k_dense_replace",
    "n_group",
    "topk_group",
    "chunk_size",
    "num_kv_shared_layers",
    "time_step_rank",
    "mamba_dt_rank",
    "max_seq_len",
    "seq_length",
    "max_sequence_length",
    "n_inner",
    "d_inner",
    "n_ctx",
}


def _fix_token_ids(d, vocab):
    for k in list(d):
        if k.endswith("token_id") and isinstance(d[k], int) and d[k] >= vocab:
            d[k] = min(vocab - 1, 3)
        elif k.endswith("token_id") and isinstance(d[k], list):
            d[k] = [min(v, vocab - 1) if isinstance(v, int) else v for v in d[k]]
        elif k.endswith("token_ids") and isinstance(d[k], list):
            d[k] = [min(v, vocab - 1) if isinstance(v, int) else v for v in d[k]]


def shrink(d: dict, depth: int = 0) -> dict:
    orig = d
    d = dict(d)
    orig_layers = None
    for k in ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers"):
        if isinstance(d.get(k), int) and not isinstance(d.get(k), bool):
            orig_layers = d[k]
            break
    for k, v in list(d.items()):
        if k in SKIP_KEYS:
            continue
        if isinstance(v, dict) and k.endswith("config") and k != "per_layer_config":
            d[k] = shrink(v, depth + 1)
            continue
        if isinstance(v, bool):
            continue
        if (
            k in EXACT
            and EXACT[k] is not None
            and v is None
            and k not in NONE_FILL_SKIP
            and depth <= 1
        ):
            d[k] = EXACT[k]
        elif k == "per_layer_config" and isinstance(v, dict) and v:
            first = v[sorted(v)[0]]
            first = (
                {kk: (2 * HD if kk == "head_dim" else vv) for kk, vv in first.items()}
                if isinstance(first, dict)
                else first
            )
            d[k] = {str(NL - 1): first}
        elif k in ("hidden_size_per_layer_input",) and isinstance(v, int):
            d[k] = 16 if v > 0 else 0
        elif k == "vocab_size_per_layer_input" and isinstance(v, int) and v == 0:
            pass
        elif k in EXACT and EXACT[k] is not None and isinstance(v, int):
            new = EXACT[k]
            if k in (
                "num_kv_shared_layers",
                "num_experts_per_tok",
                "top_k",
                "moe_topk",
                "moe_k",
                "n_shared_experts",
                "num_shared_experts",
                "first_k_dense_replace",
                "num_nextn_predict_layers",
                "n_group",
                "topk_group",
            ):
                new = min(v, new)
            d[k] = new
        elif k in EXACT and isinstance(v, list) and v and all(isinstance(x, int) for x in v):
            d[k] = [EXACT[k]] * min(len(v), NL) if orig_layers and len(v) == orig_layers else v
        # per-layer lists
        if isinstance(d[k], list) and orig_layers and len(d[k]) == orig_layers and orig_layers > NL:
            new = d[k][:NL]
            if k.endswith("layer_types"):
                uniq = list(dict.fromkeys(d[k]))
                if len(set(new)) < len(uniq) <= NL:
                    new = [uniq[i % len(uniq)] for i in range(NL)]
            d[k] = new
    # per_layer_config entries go to every new layer of the original layer's type
    plc, olt, nlt = orig.get("per_layer_config"), orig.get("layer_types"), d.get("layer_types")
    if isinstance(plc, dict) and plc and isinstance(olt, list) and isinstance(nlt, list):
        new = {}
        for key, val in plc.items():
            if isinstance(val, dict):
                val = {kk: (2 * HD if kk == "head_dim" else vv) for kk, vv in val.items()}
            typ = olt[int(key)] if int(key) < len(olt) else None
            for i, t in enumerate(nlt):
                if t == typ:
                    new[str(i)] = val
        d["per_layer_config"] = new
    # MLA: rope uses head_dim
    if isinstance(d.get("qk_rope_head_dim"), int) and "head_dim" in d:
        d["head_dim"] = d["qk_rope_head_dim"]
    # mamba heads must cover expand * hidden
    exp = d.get("mamba_expand", d.get("expand", 2))
    if isinstance(exp, (int, float)) and not isinstance(exp, bool):
        inner = (
            int(exp * d.get("hidden_size", H))
            if isinstance(d.get("hidden_size"), int)
            else int(exp * H)
        )
        if isinstance(d.get("mamba_n_heads"), int):
            d["mamba_n_heads"] = 8
            if "mamba_d_head" in d:
                d["mamba_d_head"] = inner // 8
            if "mamba_head_dim" in d:
                d["mamba_head_dim"] = inner // 8
        if isinstance(d.get("mamba_d_ssm"), int):
            d["mamba_d_ssm"] = inner
    vocab = d.get("vocab_size", VOCAB) if isinstance(d.get("vocab_size"), int) else VOCAB
    _fix_token_ids(d, vocab)
    # heuristics on unknown big ints
    for k, v in list(d.items()):
        if isinstance(v, bool) or not isinstance(v, int) or k in EXACT or k in SKIP_KEYS:
            continue
        if k.endswith("token_id"):
            continue
        lk = k.lower()
        if ("intermediate" in lk or "ffn" in lk) and v > 256:
            d[k] = FF
        elif "vocab" in lk and v > VOCAB:
            d[k] = VOCAB
        elif ("num_experts" in lk or "routed_experts" in lk) and v > 4:
            d[k] = 4
        elif ("hidden_size" in lk or lk.endswith("_dim")) and v > 256:
            d[k] = H
    return d


def build_config(model_type: str, overrides: dict | None = None):
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    base = cls(**(BASE_KW.get(model_type, {})))
    d = base.to_dict()
    d.pop("model_type", None)
    d.pop("transformers_version", None)
    d = shrink(d)
    d["use_cache"] = False
    for sub in ("text_config", "decoder_config", "decoder"):
        if isinstance(d.get(sub), dict):
            d[sub]["use_cache"] = False
    if overrides:
        for k, v in overrides.items():
            if "." in k:
                a, b = k.split(".", 1)
                d[a][b] = v
            elif v is _DEL:
                d.pop(k, None)
            else:
                d[k] = v
    return cls(**d)


class _Del:
    pass


_DEL = _Del()

BASE_KW = {
    "gemma4_assistant": {
        "text_config": {
            "hidden_size_per_layer_input": 0,
            "vocab_size_per_layer_input": 0,
            "num_kv_shared_layers": 0,
            "enable_moe_block": False,
            "use_double_wide_mlp": False,
        }
    }
}


OVERRIDES = {
    "dots3_note": {"text_config.num_key_value_heads": 4},
    "dots3_note_text": {"num_key_value_heads": 4},
    "qwen4_exp": {
        "text_config.indexer_n_heads": 2,
        "text_config.indexer_kv_heads": 1,
        "text_config.indexer_head_dim": 16,
        "text_config.indexer_budget": 8,
        "text_config.indexer_compress_ratio": 4,
        "text_config.split_ngram_parts": 4,
        "text_config.heads_per_ngram": 2,
    },
    "big_bird": {"attention_type": "original_full"},
    "bigbird_pegasus": {"attention_type": "original_full"},
    "cohere_compass_text": {
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        }
    },
    "xlnet": {"d_head": 16},
    "zamba2": {
        "hybrid_layer_ids": [1, 3],
        "mamba_headdim": 16,
        "num_query_groups": 2,
        "adapter_rank": 8,
        "layers_block_type": ["linear_attention", "hybrid", "linear_attention", "hybrid"],
        "attention_hidden_size": 128,
        "attention_head_dim": 32,
    },
    "zamba": {
        "attn_layer_period": 2,
        "attn_layer_offset": 1,
        "layers_block_type": ["linear_attention", "hybrid", "linear_attention", "hybrid"],
        "attention_hidden_size": 128,
        "attention_head_dim": 32,
    },
    "dbrx": {"attn_config.rope_theta": 10000.0, "attn_config.clip_qkv": 8.0},
    "reformer": {
        "is_decoder": True,
        "axial_pos_shape": [4, 4],
        "axial_pos_embds_dim": [32, 32],
        "attn_layers": ["local", "lsh", "local", "lsh"],
        "local_attn_chunk_length": 4,
        "lsh_attn_chunk_length": 4,
        "num_buckets": 2,
    },
    "mamba2": {"num_heads": 8, "head_dim": 16},
    "dory": {
        "num_hidden_layers": 4,
        "n_input_layers": 1,
        "n_recurrent_layers": 2,
        "n_output_layers": 1,
        "layer_types": [
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "full_attention",
        ],
    },
    "gemma4_assistant": {
        "text_config.num_kv_shared_layers": 4,
        "text_config.vocab_size_per_layer_input": 0,
        "text_config.hidden_size_per_layer_input": 0,
    },
    "kolibri1_1": {"index_layers": [1, 3]},
    "qwen4_exp_text": {
        "indexer_n_heads": 2,
        "indexer_kv_heads": 1,
        "indexer_head_dim": 16,
        "indexer_budget": 8,
        "indexer_compress_ratio": 4,
        "split_ngram_parts": 4,
        "heads_per_ngram": 2,
    },
    "lfm2_moe": {"layer_types": ["conv", "full_attention", "conv", "full_attention"]},
}


def _xmod(m):
    langs = getattr(m.config, "languages", None) or ["en_XX"]
    m.set_default_language(langs[0])


POST = {"xmod": _xmod}
