// rope_inv_freq against values computed independently in float64 with numpy from the formulas in transformers'
// modeling_rope_utils (script below; the C++ follows transformers' float32 ops, so agreement is ~1e-7 relative).
//
//   import numpy as np, math
//   def llama3(d, theta, factor, lo, hi, old):
//       inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
//       wl = 2 * math.pi / inv
//       smooth = (old / wl - lo) / (hi - lo)
//       return np.where(wl < old / hi, inv,
//                       np.where(wl > old / lo, inv / factor, (1 - smooth) * inv / factor + smooth * inv))
//   def yarn(d, theta, factor, orig, bf=32, bs=1):
//       pos = theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
//       cd = lambda r: d * math.log(orig / (r * 2 * math.pi)) / (2 * math.log(theta))
//       low, high = max(math.floor(cd(bf)), 0), min(math.ceil(cd(bs)), d - 1)
//       ext = 1 - np.clip((np.arange(d // 2) - low) / (high - low), 0, 1)
//       return (1 / (factor * pos)) * (1 - ext) + (1 / pos) * ext, 0.1 * math.log(factor) + 1
//   print(", ".join("%.9g" % x for x in llama3(64, 500000.0, 32.0, 1.0, 4.0, 8192)))   # Llama 3.2
//   print(", ".join("%.9g" % x for x in llama3(128, 500000.0, 8.0, 1.0, 4.0, 8192)))   # Llama 3.1
//   print(", ".join("%.9g" % x for x in yarn(128, 1000000.0, 4.0, 32768)[0]))          # Qwen3 + yarn x4
#include "xinfer/model/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace xinfer::model {
namespace {

ModelConfig rope_config(int head_dim, float theta) {
  ModelConfig c;
  c.head_dim = head_dim;
  c.rope_theta = theta;
  c.max_position_embeddings = 131072;
  return c;
}

ModelConfig llama3_config(int head_dim, float factor) {
  ModelConfig c = rope_config(head_dim, 500000.0f);
  c.rope_scaling.type = RopeScalingType::kLlama3;
  c.rope_scaling.factor = factor;
  c.rope_scaling.low_freq_factor = 1.0f;
  c.rope_scaling.high_freq_factor = 4.0f;
  c.rope_scaling.original_max_position_embeddings = 8192;
  return c;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-6 * want[i]) << "inv_freq[" << i << "]";
}

TEST(Rope, Llama32Llama3Scaling) {
  const std::vector<double> want = {
      1, 0.663601238, 0.440366603, 0.292227823, 0.193922745, 0.128687373, 0.0853971003, 0.0566696214,
      0.0376060309, 0.0249554087, 0.0165604401, 0.0109895285, 0.00729266474, 0.00483942135, 0.00321144599,
      0.00129054793, 0.000429556797, 9.7082878e-05, 1.94616382e-05, 1.29147672e-05, 8.57025549e-06,
      5.68723215e-06, 3.77405429e-06, 2.5044671e-06, 1.66196747e-06, 1.10288367e-06, 7.31874968e-07,
      4.85673134e-07, 3.22293293e-07, 2.13874228e-07, 1.41927203e-07, 9.41830673e-08};
  expect_close(rope_inv_freq(llama3_config(64, 32.0f)), want);
}

TEST(Rope, Llama31Llama3Scaling) {
  const std::vector<double> want = {
      1, 0.814617234, 0.663601238, 0.540581005, 0.440366603, 0.358730224, 0.292227823, 0.23805382,
      0.193922745, 0.15797281, 0.128687373, 0.104830952, 0.0853971003, 0.0695659496, 0.0566696214,
      0.0461640503, 0.0376060309, 0.0306345209, 0.0249554087, 0.020329106, 0.0165604401, 0.0134904199,
      0.0109895285, 0.00895225934, 0.00729266474, 0.00594073038, 0.00483942135, 0.00394227603, 0.00321144599,
      0.00216657076, 0.00137189357, 0.000856751413, 0.000524846161, 0.00031269375, 0.000178507813,
      9.55621235e-05, 7.78465527e-05, 6.34151435e-05, 5.16590687e-05, 4.20823677e-05, 3.4281022e-05,
      2.79259113e-05, 2.27489286e-05, 1.85316693e-05, 1.50962172e-05, 1.22976387e-05, 1.00178684e-05,
      8.16072825e-06, 6.64786987e-06, 5.41546937e-06, 4.41153467e-06, 3.59371217e-06, 2.92749987e-06,
      2.38479185e-06, 1.94269254e-06, 1.58255082e-06, 1.28917317e-06, 1.05018268e-06, 8.55496913e-07,
      6.96902529e-07, 5.6770881e-07, 4.62465381e-07, 3.76732269e-07, 3.06892599e-07};
  expect_close(rope_inv_freq(llama3_config(128, 8.0f)), want);
  EXPECT_FLOAT_EQ(rope_attention_scaling(llama3_config(128, 8.0f)), 1.0f);
}

TEST(Rope, DefaultLinearAndDynamic) {
  ModelConfig c = rope_config(8, 10000.0f);
  // 1 / 10000^(2i/8) = 1, 0.1, 0.01, 0.001
  expect_close(rope_inv_freq(c), {1.0, 0.1, 0.01, 0.001});
  c.rope_scaling.type = RopeScalingType::kLinear;
  c.rope_scaling.factor = 4.0f;
  expect_close(rope_inv_freq(c), {0.25, 0.025, 0.0025, 0.00025});
  // Dynamic NTK at (or below) its base length leaves theta unchanged.
  c.rope_scaling.type = RopeScalingType::kDynamic;
  expect_close(rope_inv_freq(c), {1.0, 0.1, 0.01, 0.001});
  EXPECT_FLOAT_EQ(rope_attention_scaling(c), 1.0f);
}

TEST(Rope, Yarn) {
  ModelConfig c = rope_config(128, 1000000.0f);
  c.rope_scaling.type = RopeScalingType::kYarn;
  c.rope_scaling.factor = 4.0f;
  c.rope_scaling.original_max_position_embeddings = 32768;
  const std::vector<double> want = {
      1, 0.805842188, 0.649381632, 0.523299115, 0.421696503, 0.339820833, 0.273841963, 0.220673407,
      0.177827941, 0.143301257, 0.115478198, 0.0930572041, 0.0749894209, 0.060429639, 0.0486967525,
      0.0392418976, 0.0316227766, 0.0254829675, 0.0205352503, 0.016548171, 0.0133352143, 0.0107460783,
      0.00865964323, 0.00697830585, 0.00537532149, 0.00413173802, 0.00316842257, 0.00242342238, 0.00184827656,
      0.00140511248, 0.00106436098, 0.000802959728, 0.000602941176, 0.000450323576, 0.000334240546,
      0.000246258407, 0.000179841156, 0.000129931495, 9.2623017e-05, 6.49039432e-05, 4.44569853e-05,
      3.58253143e-05, 2.88695496e-05, 2.3264301e-05, 1.87473552e-05, 1.51074098e-05, 1.21741881e-05,
      9.8104744e-06, 7.90569415e-06, 6.37074187e-06, 5.13381257e-06, 4.13704275e-06, 3.33380358e-06,
      2.68651957e-06, 2.16491081e-06, 1.74457646e-06, 1.40585331e-06, 1.13289591e-06, 9.12935318e-07,
      7.35681794e-07, 5.92843426e-07, 4.77738244e-07, 3.84981632e-07, 3.1023444e-07};
  expect_close(rope_inv_freq(c), want);
  EXPECT_NEAR(rope_attention_scaling(c), 1.138629436111989, 1e-6);  // 0.1 * ln(4) + 1
  c.rope_scaling.attention_factor = 0.5f;
  EXPECT_FLOAT_EQ(rope_attention_scaling(c), 0.5f);
}

}  // namespace
}  // namespace xinfer::model
