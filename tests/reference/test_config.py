"""Every impossible configuration or decode shape is refused with one line naming the field."""
import pytest

from reference import ConfigError, K3Config, check_cache_lens, make_inputs, preset

TINY = preset("tiny")

BAD_CONFIGS = [
    ({"hidden": 0}, "hidden"),
    ({"top_k": 13}, "top_k"),
    ({"n_group": 5}, "n_group"),
    ({"n_group": 2, "topk_group": 3}, "topk_group"),
    ({"n_group": 4, "topk_group": 1}, "topk_group"),            # 1 group of 3 cannot give top_k=4
    ({"n_experts": 12, "n_group": 12, "topk_group": 4}, "n_group"),  # groups of 1: no top-2 score
    ({"latent_dim": 48}, "latent_dim"),
    ({"moe_intermediate": 40}, "moe_intermediate"),
    ({"v_head_dim": 8}, "v_head_dim"),
    ({"gate_lower_bound": 0.0}, "gate_lower_bound"),
    ({"gate_lower_bound": -6.0}, "gate_lower_bound"),
    ({"conv_width": 1}, "conv_width"),
    ({"kda_layers": (1, 2)}, "kda_layers"),
    ({"full_attn_layers": (3, 4, 5)}, "kda_layers"),
    ({"routed_scaling_factor": 0.0}, "routed_scaling_factor"),
    ({"rms_eps": 0.0}, "rms_eps"),
    ({"qk_rope_dim": -1}, "qk_rope_dim"),
    ({"first_k_dense_replace": 9}, "first_k_dense_replace"),
]


@pytest.mark.parametrize("change,field", BAD_CONFIGS, ids=[f for _, f in BAD_CONFIGS])
def test_impossible_config_names_the_field(change, field):
    with pytest.raises(ConfigError) as e:
        TINY.replace(**change)
    msg = str(e.value)
    assert field in msg and "\n" not in msg


@pytest.mark.parametrize("call,field", [
    (lambda: K3Config.from_dict({**TINY.to_dict(), "bogus": 1}), "bogus"),
    (lambda: check_cache_lens(TINY, [3, -1]), "cache_lens[1]"),
    (lambda: check_cache_lens(TINY, [15], capacity=15), "cache_lens[0]"),
    (lambda: make_inputs(TINY, "kda", 0, batch=4, n_slots=3), "n_slots"),
    (lambda: make_inputs(TINY, "kda", 0, batch=2, state_idx=[1, 1]), "state_idx"),
    (lambda: make_inputs(TINY, "moe", 0, batch=2, value_dist="weird"), "value_dist"),
    (lambda: make_inputs(TINY, "mla", 0, batch=1, cache_lens=[10], cache_capacity=8192), "cache_capacity"),
    (lambda: make_inputs(TINY, "layer", 0, batch=1, layer_idx=5), "layer_idx"),
    (lambda: preset("huge"), "huge"),
])
def test_impossible_shapes_name_the_field(call, field):
    with pytest.raises(ConfigError) as e:
        call()
    assert field in str(e.value) and "\n" not in str(e.value)


def test_presets_are_valid_and_match_the_spec_schedule():
    full = preset("full")
    assert sum(full.is_kda_layer(i) for i in range(93)) == 69 and full.n_blocks == 8
    assert not full.is_kda_layer(91) and not full.is_kda_layer(92) and full.is_kda_layer(0)
    assert [TINY.layer_kind(i) for i in range(5)] == ["kda", "kda", "kda", "mla", "mla"]
