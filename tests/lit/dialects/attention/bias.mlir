// tessera.attention with an additive bias (dialects/attention.py): a fourth operand [batch or 1, heads or 1,
// seq_q, seq_k] in the op's dtype, with a '_bias' kernel; it round-trips, and each verifier rule reports its message.
// Last, the configuration rule of every attention op: builder block sizes.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

%q = "test.op"() : () -> tensor<2x4x256x64xbf16>
%k = "test.op"() : () -> tensor<2x4x300x64xbf16>
%b = "test.op"() : () -> tensor<1x4x256x300xbf16>
%o = "tessera.attention"(%q, %k, %k, %b) <{causal = true, scale = 1.250000e-01 : f32, head_dim = 64 : i64, dtype = "bf16", kernel = "flash_attention_d64_bf16_causal_bias_b1", block_m = 128 : i64, block_n = 128 : i64}> : (tensor<2x4x256x64xbf16>, tensor<2x4x300x64xbf16>, tensor<2x4x300x64xbf16>, tensor<1x4x256x300xbf16>) -> tensor<2x4x256x64xbf16>
// CHECK: %o = "tessera.attention"(%q, %k, %k, %b) <{{{.*}}kernel = "flash_attention_d64_bf16_causal_bias_b1"{{.*}}}> : (tensor<2x4x256x64xbf16>, tensor<2x4x300x64xbf16>, tensor<2x4x300x64xbf16>, tensor<1x4x256x300xbf16>) -> tensor<2x4x256x64xbf16>

// -----

%q = "test.op"() : () -> tensor<2x4x256x64xbf16>
%b = "test.op"() : () -> tensor<2x4x1x256xbf16>
// CHECK: 'tessera.attention' op bias must be a tensor [2 or 1, 4 or 1, 256, 256] (batch, heads, seq_q, seq_k), got tensor<2x4x1x256xbf16>
%o = "tessera.attention"(%q, %q, %q, %b) <{causal = false, scale = 1.250000e-01 : f32, head_dim = 64 : i64, dtype = "bf16", kernel = "flash_attention_d64_bf16_bias", block_m = 128 : i64, block_n = 128 : i64}> : (tensor<2x4x256x64xbf16>, tensor<2x4x256x64xbf16>, tensor<2x4x256x64xbf16>, tensor<2x4x1x256xbf16>) -> tensor<2x4x256x64xbf16>

// -----

%q = "test.op"() : () -> tensor<2x4x256x64xbf16>
%b = "test.op"() : () -> tensor<2x4x256x256xf32>
// CHECK: 'tessera.attention' op bias has element type f32, but dtype is bf16
%o = "tessera.attention"(%q, %q, %q, %b) <{causal = false, scale = 1.250000e-01 : f32, head_dim = 64 : i64, dtype = "bf16", kernel = "flash_attention_d64_bf16_bias", block_m = 128 : i64, block_n = 128 : i64}> : (tensor<2x4x256x64xbf16>, tensor<2x4x256x64xbf16>, tensor<2x4x256x64xbf16>, tensor<2x4x256x256xf32>) -> tensor<2x4x256x64xbf16>

// -----

%q = "test.op"() : () -> tensor<2x4x256x64xbf16>
// CHECK: 'tessera.attention' op kernel flash_attention_d64_bf16_bias and the operands disagree: a bias operand goes with a '_bias' kernel
%o = "tessera.attention"(%q, %q, %q) <{causal = false, scale = 1.250000e-01 : f32, head_dim = 64 : i64, dtype = "bf16", kernel = "flash_attention_d64_bf16_bias", block_m = 128 : i64, block_n = 128 : i64}> : (tensor<2x4x256x64xbf16>, tensor<2x4x256x64xbf16>, tensor<2x4x256x64xbf16>) -> tensor<2x4x256x64xbf16>

// -----

// The block sizes are the builders' (a positive multiple of 16): a graph with block_m 3 was run, and refused
// by the builder without a location.
%q = "test.op"() : () -> tensor<2x4x256x64xbf16>
// CHECK: 'tessera.attention' op block_m must be a positive multiple of 16; got 3
%o = "tessera.attention"(%q, %q, %q) <{causal = false, scale = 1.250000e-01 : f32, head_dim = 64 : i64, dtype = "bf16", kernel = "flash_attention_d64_bf16", block_m = 3 : i64, block_n = 128 : i64}> : (tensor<2x4x256x64xbf16>, tensor<2x4x256x64xbf16>, tensor<2x4x256x64xbf16>) -> tensor<2x4x256x64xbf16>
