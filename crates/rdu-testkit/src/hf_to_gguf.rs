//! Test support: a small HF → GGUF converter for the tiny transformers fixtures in
//! `tests/data/fixtures/hf/`, doing what llama.cpp's `convert_hf_to_gguf.py` does for the
//! `deepseek2`, `qwen3next` and `qwen35moe` architectures (there are no llama.cpp-made GGUF
//! fixtures of these families): llama.cpp tensor names, shapes written as GGUF dims (numpy
//! order reversed), the dialect transforms — DeepSeek's `kv_b` split per head into
//! `attn_k_b = W_UKᵀ` and `attn_v_b = W_UV`, experts stacked, Qwen norms stored `w+1` (all but
//! the DeltaNet output norm), `A_log → ssm_a = −exp(A_log)`, conv1d squeezed, Qwen3-Next's
//! grouped `in_proj_qkvz` regrouped into `attn_qkv` (q all | k all | v all) + `attn_gate`,
//! Qwen3.5's split projections with the value heads reordered from grouped to tiled — and the
//! metadata keys llama.cpp reads. Matrices are written F32 or Q8_0 (1-D tensors, norms, routers,
//! the shared-expert gate and conv kernels stay F32, as the converter keeps them).
use crate::gguf_writer::GgufWriter;
use rdu_checkpoint::{quantize_q8_0, GgufValue, GgufValueType, SafeTensors};
use serde_json::Value;
use std::path::Path;

/// The llama.cpp architecture to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// From a `deepseek_v2` checkpoint.
    Deepseek2,
    /// From a `qwen3_next` checkpoint.
    Qwen3Next,
    /// From a `qwen3_next` checkpoint, as Qwen3.5-MoE stores the same model: split DeltaNet
    /// projections (`in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`), value heads tiled.
    Qwen35Moe,
}

/// How matrices are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quant {
    F32,
    Q8_0,
    /// F32 holding exactly the values the `Q8_0` file's blocks stand for.
    Q8_0Dequantized,
}

/// One tensor in numpy order.
struct T {
    shape: Vec<usize>,
    data: Vec<f32>,
}

impl T {
    fn new(shape: Vec<usize>, data: Vec<f32>) -> T {
        assert_eq!(shape.iter().product::<usize>(), data.len(), "shape {shape:?}");
        T { shape, data }
    }

    /// Rows (along axis 0) in the given order, each `row_len` values.
    fn rows(&self, row_len: usize, order: &[usize]) -> Vec<f32> {
        order.iter().flat_map(|&r| self.data[r * row_len..(r + 1) * row_len].iter().copied()).collect()
    }
}

/// Converts the HF checkpoint in `dir` to a GGUF file at `out`.
pub fn convert(dir: &Path, target: Target, quant: Quant, out: &Path) {
    convert_edited(dir, target, quant, out, &|_| {});
}

/// [`convert`], with `edit` applied to the metadata before it is written (for error tests).
pub fn convert_edited(dir: &Path, target: Target, quant: Quant, out: &Path, edit: &dyn Fn(&mut Kvs)) {
    convert_with(dir, target, quant, out, edit, false);
}

/// [`convert_edited`]; with `squeeze`, every tensor loses its unit axes, as older versions of
/// llama.cpp's converter wrote them (e.g. the shared-expert gate `[1, H]` as `[H]`).
pub fn convert_with(dir: &Path, target: Target, quant: Quant, out: &Path, edit: &dyn Fn(&mut Kvs), squeeze: bool) {
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).expect("config.json")).expect("json");
    let st = SafeTensors::open(dir).expect("safetensors");
    let read = |name: &str| T::new(st.shape(name).expect(name).to_vec(), st.read_f32(name).expect(name));
    let (kvs, tensors) = match target {
        Target::Deepseek2 => deepseek2(&config, &st, &read),
        Target::Qwen3Next | Target::Qwen35Moe => qwen_hybrid(&config, &st, &read, target),
    };
    let mut kvs = kvs;
    edit(&mut kvs);
    let mut writer = GgufWriter::new();
    for (k, v) in kvs {
        writer = writer.kv(&k, v);
    }
    for (name, mut t) in tensors {
        if squeeze && t.shape.len() > 1 {
            t.shape.retain(|&d| d != 1);
        }
        let dims: Vec<u64> = t.shape.iter().rev().map(|&d| d as u64).collect();
        let quantise = quant != Quant::F32
            && t.shape.len() >= 2
            && t.shape[t.shape.len() - 1] % 32 == 0
            && !name.ends_with("_norm.weight")
            && !name.ends_with("ffn_gate_inp.weight")
            && !name.ends_with("ffn_gate_inp_shexp.weight")
            && !name.ends_with("ssm_conv1d.weight");
        let (type_id, bytes) = match (quantise, quant) {
            (true, Quant::Q8_0) => {
                let q = quantize_q8_0(&t.data, &t.shape).expect("quantise");
                (8, q.blocks.iter().flat_map(|b| b.to_bytes()).collect())
            }
            (true, _) => {
                let values = quantize_q8_0(&t.data, &t.shape).expect("quantise").dequantize();
                (0, values.iter().flat_map(|v| v.to_le_bytes()).collect())
            }
            (false, _) => (0, t.data.iter().flat_map(|v| v.to_le_bytes()).collect()),
        };
        writer = writer.tensor(&name, &dims, type_id, bytes);
    }
    std::fs::write(out, writer.build()).expect("write GGUF");
}

pub type Kvs = Vec<(String, GgufValue)>;
type Tensors = Vec<(String, T)>;

fn u(config: &Value, key: &str) -> usize {
    config[key].as_u64().unwrap_or_else(|| panic!("config.{key}")) as usize
}

fn f(config: &Value, key: &str) -> f64 {
    config[key].as_f64().unwrap_or_else(|| panic!("config.{key}"))
}

fn u32v(v: usize) -> GgufValue {
    GgufValue::U32(v as u32)
}

fn f32v(v: f64) -> GgufValue {
    GgufValue::F32(v as f32)
}

/// The metadata every architecture gets from transformers' config (TextModel's keys).
fn common_kvs(arch: &str, config: &Value) -> Kvs {
    let rope = &config["rope_parameters"];
    let theta = rope["rope_theta"].as_f64().or_else(|| config["rope_theta"].as_f64()).unwrap_or(10_000.0);
    let mut kvs = vec![
        ("general.architecture".to_string(), GgufValue::String(arch.to_string())),
        (format!("{arch}.block_count"), u32v(u(config, "num_hidden_layers"))),
        (format!("{arch}.context_length"), u32v(u(config, "max_position_embeddings"))),
        (format!("{arch}.embedding_length"), u32v(u(config, "hidden_size"))),
        (format!("{arch}.feed_forward_length"), u32v(u(config, "intermediate_size"))),
        (format!("{arch}.attention.head_count"), u32v(u(config, "num_attention_heads"))),
        (format!("{arch}.attention.head_count_kv"), u32v(u(config, "num_key_value_heads"))),
        (format!("{arch}.rope.freq_base"), f32v(theta)),
        (format!("{arch}.attention.layer_norm_rms_epsilon"), f32v(f(config, "rms_norm_eps"))),
        (format!("{arch}.vocab_size"), u32v(u(config, "vocab_size"))),
        ("general.file_type".to_string(), u32v(0)),
    ];
    for (id, key) in [("bos_token_id", "tokenizer.ggml.bos_token_id"), ("eos_token_id", "tokenizer.ggml.eos_token_id")]
    {
        if let Some(v) = config[id].as_u64() {
            kvs.push((key.to_string(), u32v(v as usize)));
        }
    }
    kvs
}

/// Sets (or adds) `key`.
fn set(kvs: &mut Kvs, key: String, value: GgufValue) {
    kvs.retain(|(k, _)| *k != key);
    kvs.push((key, value));
}

/// Stacks `model.layers.{l}.{prefix}.{e}.{proj}.weight` over the experts.
fn stack(read: &dyn Fn(&str) -> T, l: usize, prefix: &str, experts: usize, proj: &str) -> T {
    let mut data = Vec::new();
    let mut inner = Vec::new();
    for e in 0..experts {
        let t = read(&format!("model.layers.{l}.{prefix}.{e}.{proj}.weight"));
        inner = t.shape;
        data.extend(t.data);
    }
    let mut shape = vec![experts];
    shape.extend(inner);
    T::new(shape, data)
}

fn plus_one(mut t: T) -> T {
    t.data.iter_mut().for_each(|v| *v += 1.0);
    t
}

/// MLA's widths: (kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim).
fn mla_dims(config: &Value) -> (usize, usize, usize, usize) {
    (u(config, "kv_lora_rank"), u(config, "qk_nope_head_dim"), u(config, "qk_rope_head_dim"), u(config, "v_head_dim"))
}

/// The `deepseek2` metadata llama.cpp's converter writes.
fn deepseek2_kvs(config: &Value) -> Kvs {
    let arch = "deepseek2";
    let mut kvs = common_kvs(arch, config);
    let (kvr, nope, rope, v) = mla_dims(config);
    // MLA becomes MQA over the 576-wide latent (kv_lora + rope).
    set(&mut kvs, format!("{arch}.attention.head_count_kv"), u32v(1));
    kvs.push((format!("{arch}.leading_dense_block_count"), u32v(u(config, "first_k_dense_replace"))));
    if let Some(q) = config["q_lora_rank"].as_u64() {
        kvs.push((format!("{arch}.attention.q_lora_rank"), u32v(q as usize)));
    }
    kvs.push((format!("{arch}.attention.kv_lora_rank"), u32v(kvr)));
    kvs.push((format!("{arch}.attention.key_length"), u32v(kvr + rope)));
    kvs.push((format!("{arch}.attention.value_length"), u32v(kvr)));
    kvs.push((format!("{arch}.attention.key_length_mla"), u32v(nope + rope)));
    kvs.push((format!("{arch}.attention.value_length_mla"), u32v(v)));
    let experts = u(config, "n_routed_experts");
    kvs.push((format!("{arch}.expert_count"), u32v(experts)));
    kvs.push((format!("{arch}.expert_used_count"), u32v(u(config, "num_experts_per_tok"))));
    kvs.push((format!("{arch}.expert_feed_forward_length"), u32v(u(config, "moe_intermediate_size"))));
    kvs.push((format!("{arch}.expert_shared_count"), u32v(u(config, "n_shared_experts"))));
    if let Some(s) = config["routed_scaling_factor"].as_f64() {
        kvs.push((format!("{arch}.expert_weights_scale"), f32v(s)));
    }
    if config["norm_topk_prob"].as_bool() == Some(true) {
        kvs.push((format!("{arch}.expert_weights_norm"), GgufValue::Bool(true)));
    }
    if let (Some(g), Some(tg)) = (config["n_group"].as_u64(), config["topk_group"].as_u64()) {
        kvs.push((format!("{arch}.expert_group_count"), u32v(g as usize)));
        kvs.push((format!("{arch}.expert_group_used_count"), u32v(tg as usize)));
    }
    kvs.push((format!("{arch}.rope.dimension_count"), u32v(rope)));
    let rp = &config["rope_parameters"];
    if rp["rope_type"].as_str() == Some("yarn") {
        kvs.push((format!("{arch}.rope.scaling.type"), GgufValue::String("yarn".into())));
        kvs.push((format!("{arch}.rope.scaling.factor"), f32v(rp["factor"].as_f64().expect("factor"))));
        let orig = rp["original_max_position_embeddings"].as_u64().expect("original_max_position_embeddings");
        kvs.push((format!("{arch}.rope.scaling.original_context_length"), u32v(orig as usize)));
        if let Some(m) = rp["mscale_all_dim"].as_f64() {
            kvs.push((format!("{arch}.rope.scaling.yarn_log_multiplier"), f32v(0.1 * m)));
        }
    }
    kvs
}

fn deepseek2(config: &Value, st: &SafeTensors, read: &dyn Fn(&str) -> T) -> (Kvs, Tensors) {
    let kvs = deepseek2_kvs(config);
    let heads = u(config, "num_attention_heads");
    let experts = u(config, "n_routed_experts");
    let (kvr, nope, _, v) = mla_dims(config);
    let mut out: Tensors = vec![
        ("token_embd.weight".into(), read("model.embed_tokens.weight")),
        ("output_norm.weight".into(), read("model.norm.weight")),
        ("output.weight".into(), read("lm_head.weight")),
    ];
    for l in 0..u(config, "num_hidden_layers") {
        let at = |rest: &str| format!("model.layers.{l}.{rest}");
        let blk = |rest: &str| format!("blk.{l}.{rest}");
        let mut put = |name: String, t: T| out.push((name, t));
        put(blk("attn_norm.weight"), read(&at("input_layernorm.weight")));
        put(blk("ffn_norm.weight"), read(&at("post_attention_layernorm.weight")));
        if st.contains(&at("self_attn.q_proj.weight")) {
            put(blk("attn_q.weight"), read(&at("self_attn.q_proj.weight")));
        } else {
            put(blk("attn_q_a.weight"), read(&at("self_attn.q_a_proj.weight")));
            put(blk("attn_q_a_norm.weight"), read(&at("self_attn.q_a_layernorm.weight")));
            put(blk("attn_q_b.weight"), read(&at("self_attn.q_b_proj.weight")));
        }
        put(blk("attn_kv_a_mqa.weight"), read(&at("self_attn.kv_a_proj_with_mqa.weight")));
        put(blk("attn_kv_a_norm.weight"), read(&at("self_attn.kv_a_layernorm.weight")));
        // kv_b [h·(nope + v), kvr] viewed [h, nope + v, kvr]: k_b = its first nope rows per head,
        // transposed to [h, kvr, nope]; v_b = the last v rows, [h, v, kvr].
        let kv_b = read(&at("self_attn.kv_b_proj.weight"));
        let (mut k_b, mut v_b) = (Vec::new(), Vec::new());
        for h in 0..heads {
            let head = &kv_b.data[h * (nope + v) * kvr..(h + 1) * (nope + v) * kvr];
            for c in 0..kvr {
                k_b.extend((0..nope).map(|i| head[i * kvr + c]));
            }
            v_b.extend_from_slice(&head[nope * kvr..]);
        }
        put(blk("attn_k_b.weight"), T::new(vec![heads, kvr, nope], k_b));
        put(blk("attn_v_b.weight"), T::new(vec![heads, v, kvr], v_b));
        put(blk("attn_output.weight"), read(&at("self_attn.o_proj.weight")));
        if st.contains(&at("mlp.gate.weight")) {
            put(blk("ffn_gate_inp.weight"), read(&at("mlp.gate.weight")));
            for (proj, name) in
                [("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")]
            {
                put(blk(&format!("{name}.weight")), stack(read, l, "mlp.experts", experts, proj));
            }
            for (proj, name) in
                [("gate_proj", "ffn_gate_shexp"), ("up_proj", "ffn_up_shexp"), ("down_proj", "ffn_down_shexp")]
            {
                put(blk(&format!("{name}.weight")), read(&at(&format!("mlp.shared_experts.{proj}.weight"))));
            }
        } else {
            for (proj, name) in [("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")] {
                put(blk(&format!("{name}.weight")), read(&at(&format!("mlp.{proj}.weight"))));
            }
        }
    }
    (kvs, out)
}

/// Qwen3-Next's and Qwen3.5's DeltaNet widths.
#[derive(Clone, Copy)]
struct Gdn {
    nk: usize,
    nv: usize,
    dk: usize,
    dv: usize,
    /// Value heads per key head.
    r: usize,
    kd: usize,
    vd: usize,
}

impl Gdn {
    fn of(config: &Value) -> Gdn {
        let (nk, nv) = (u(config, "linear_num_key_heads"), u(config, "linear_num_value_heads"));
        let (dk, dv) = (u(config, "linear_key_head_dim"), u(config, "linear_value_head_dim"));
        Gdn { nk, nv, dk, dv, r: nv / nk, kd: nk * dk, vd: nv * dv }
    }
}

/// The `qwen3next` / `qwen35moe` metadata llama.cpp's converter writes.
fn qwen_hybrid_kvs(config: &Value, arch: &str, target: Target) -> Kvs {
    let mut kvs = common_kvs(arch, config);
    let Gdn { nk, nv, dk, vd, .. } = Gdn::of(config);
    let head_dim = u(config, "head_dim");
    let partial = config["rope_parameters"]["partial_rotary_factor"]
        .as_f64()
        .or_else(|| config["partial_rotary_factor"].as_f64())
        .unwrap_or(0.25);
    kvs.push((format!("{arch}.expert_count"), u32v(u(config, "num_experts"))));
    kvs.push((format!("{arch}.expert_used_count"), u32v(u(config, "num_experts_per_tok"))));
    kvs.push((format!("{arch}.attention.key_length"), u32v(head_dim)));
    kvs.push((format!("{arch}.attention.value_length"), u32v(head_dim)));
    kvs.push((format!("{arch}.expert_feed_forward_length"), u32v(u(config, "moe_intermediate_size"))));
    let shared = u(config, "shared_expert_intermediate_size");
    kvs.push((format!("{arch}.expert_shared_feed_forward_length"), u32v(shared)));
    kvs.push((format!("{arch}.ssm.conv_kernel"), u32v(u(config, "linear_conv_kernel_dim"))));
    kvs.push((format!("{arch}.ssm.state_size"), u32v(dk)));
    kvs.push((format!("{arch}.ssm.group_count"), u32v(nk)));
    kvs.push((format!("{arch}.ssm.time_step_rank"), u32v(nv)));
    kvs.push((format!("{arch}.ssm.inner_size"), u32v(vd)));
    let interval = config["full_attention_interval"].as_u64().unwrap_or(4) as usize;
    kvs.push((format!("{arch}.full_attention_interval"), u32v(interval)));
    let rotary = (head_dim as f64 * partial) as usize;
    kvs.push((format!("{arch}.rope.dimension_count"), u32v(rotary)));
    if target == Target::Qwen35Moe {
        // Interleaved MRoPE sections (time, height, width, extra) over rotary / 2 frequencies.
        let half = rotary / 2;
        let sections = [half - half / 2, half / 2, 0, 0].map(|s| GgufValue::I32(s as i32)).to_vec();
        kvs.push((format!("{arch}.rope.dimension_sections"), GgufValue::Array(GgufValueType::I32, sections)));
    }
    kvs
}

fn qwen_hybrid(config: &Value, st: &SafeTensors, read: &dyn Fn(&str) -> T, target: Target) -> (Kvs, Tensors) {
    let arch = if target == Target::Qwen3Next { "qwen3next" } else { "qwen35moe" };
    let kvs = qwen_hybrid_kvs(config, arch, target);
    let gdn = Gdn::of(config);
    let (nk, nv, r) = (gdn.nk, gdn.nv, gdn.r);
    let experts = u(config, "num_experts");

    // Value head `g·r + j` (grouped by key head) → `j·nk + g` (tiled) for Qwen3.5.
    let tiled = |h: usize| if target == Target::Qwen35Moe { (h % r) * nk + h / r } else { h };
    let mut v_order = vec![0; nv];
    (0..nv).for_each(|h| v_order[tiled(h)] = h);
    let norm = |name: &str| plus_one(read(name));

    let mut out: Tensors = vec![
        ("token_embd.weight".into(), read("model.embed_tokens.weight")),
        ("output_norm.weight".into(), norm("model.norm.weight")),
        ("output.weight".into(), read("lm_head.weight")),
    ];
    for l in 0..u(config, "num_hidden_layers") {
        let at = |rest: &str| format!("model.layers.{l}.{rest}");
        let blk = |rest: &str| format!("blk.{l}.{rest}");
        let mut put = |name: String, t: T| out.push((name, t));
        put(blk("attn_norm.weight"), norm(&at("input_layernorm.weight")));
        put(blk("post_attention_norm.weight"), norm(&at("post_attention_layernorm.weight")));
        if st.contains(&at("self_attn.q_proj.weight")) {
            for (hf, gg) in
                [("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")]
            {
                put(blk(&format!("{gg}.weight")), read(&at(&format!("self_attn.{hf}.weight"))));
            }
            put(blk("attn_q_norm.weight"), norm(&at("self_attn.q_norm.weight")));
            put(blk("attn_k_norm.weight"), norm(&at("self_attn.k_norm.weight")));
        } else {
            for (name, t) in deltanet(&at, read, &gdn, &v_order, target) {
                put(blk(name), t);
            }
        }
        put(blk("ffn_gate_inp.weight"), read(&at("mlp.gate.weight")));
        for (proj, name) in [("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")]
        {
            put(blk(&format!("{name}.weight")), stack(read, l, "mlp.experts", experts, proj));
        }
        for (proj, name) in
            [("gate_proj", "ffn_gate_shexp"), ("up_proj", "ffn_up_shexp"), ("down_proj", "ffn_down_shexp")]
        {
            put(blk(&format!("{name}.weight")), read(&at(&format!("mlp.shared_expert.{proj}.weight"))));
        }
        put(blk("ffn_gate_inp_shexp.weight"), read(&at("mlp.shared_expert_gate.weight")));
    }
    (kvs, out)
}

/// A DeltaNet layer's tensors (GGUF name within the block, tensor), as the converter writes
/// them: q/k/v regrouped, value heads in GGUF order (`v_order`), norms and A as it stores them.
fn deltanet(
    at: &dyn Fn(&str) -> String,
    read: &dyn Fn(&str) -> T,
    gdn: &Gdn,
    v_order: &[usize],
    target: Target,
) -> Vec<(&'static str, T)> {
    let Gdn { nk, nv, dk, dv, r, kd, vd } = *gdn;
    let mut out = Vec::new();
    // in_proj_qkvz [nk·(2dk + 2r·dv), H]: per key group [q | k | v (r heads) | z (r heads)].
    let qkvz = read(&at("linear_attn.in_proj_qkvz.weight"));
    let hidden = qkvz.shape[1];
    let group = 2 * dk + 2 * r * dv;
    let rows_of = |g: usize, start: usize, len: usize| g * group + start..g * group + start + len;
    let mut qkv_rows: Vec<usize> = (0..nk).flat_map(|g| rows_of(g, 0, dk)).collect();
    qkv_rows.extend((0..nk).flat_map(|g| rows_of(g, dk, dk)));
    let v_rows: Vec<usize> = (0..nk).flat_map(|g| rows_of(g, 2 * dk, r * dv)).collect();
    let z_rows: Vec<usize> = (0..nk).flat_map(|g| rows_of(g, 2 * dk + r * dv, r * dv)).collect();
    // Value heads (dv rows each) in GGUF order.
    let heads_in_order = |rows: &[usize]| -> Vec<usize> {
        v_order.iter().flat_map(|&h| rows[h * dv..(h + 1) * dv].iter().copied()).collect()
    };
    qkv_rows.extend(heads_in_order(&v_rows));
    out.push(("attn_qkv.weight", T::new(vec![2 * kd + vd, hidden], qkvz.rows(hidden, &qkv_rows))));
    out.push(("attn_gate.weight", T::new(vec![vd, hidden], qkvz.rows(hidden, &heads_in_order(&z_rows)))));
    // in_proj_ba [2·nv, H]: per key group [b (r) | a (r)].
    let ba = read(&at("linear_attn.in_proj_ba.weight"));
    if target == Target::Qwen3Next {
        out.push(("ssm_ba.weight", ba));
    } else {
        let b_rows: Vec<usize> = v_order.iter().map(|&h| (h / r) * 2 * r + h % r).collect();
        let a_rows: Vec<usize> = v_order.iter().map(|&h| (h / r) * 2 * r + r + h % r).collect();
        out.push(("ssm_beta.weight", T::new(vec![nv, hidden], ba.rows(hidden, &b_rows))));
        out.push(("ssm_alpha.weight", T::new(vec![nv, hidden], ba.rows(hidden, &a_rows))));
    }
    // conv1d [conv, 1, K] squeezed to [conv, K]; its v channels reordered with the heads.
    let conv = read(&at("linear_attn.conv1d.weight"));
    let k = conv.shape[2];
    let mut conv_rows: Vec<usize> = (0..2 * kd).collect();
    conv_rows.extend(v_order.iter().flat_map(|&h| 2 * kd + h * dv..2 * kd + (h + 1) * dv));
    out.push(("ssm_conv1d.weight", T::new(vec![2 * kd + vd, k], conv.rows(k, &conv_rows))));
    let per_head = |t: T| T::new(vec![nv], t.rows(1, v_order));
    out.push(("ssm_dt.bias", per_head(read(&at("linear_attn.dt_bias")))));
    let a = per_head(read(&at("linear_attn.A_log")));
    out.push(("ssm_a", T::new(vec![nv], a.data.iter().map(|v| -v.exp()).collect())));
    out.push(("ssm_norm.weight", read(&at("linear_attn.norm.weight"))));
    // out_proj [H, vd]: its input columns follow the value heads.
    let o = read(&at("linear_attn.out_proj.weight"));
    let cols: Vec<usize> = v_order.iter().flat_map(|&h| h * dv..(h + 1) * dv).collect();
    let data = (0..o.shape[0]).flat_map(|row| cols.iter().map(move |&c| (row, c))).map(|(row, c)| o.data[row * vd + c]);
    out.push(("ssm_out.weight", T::new(o.shape.clone(), data.collect())));
    out
}
