// The bundled model (models/xinfer-tiny-shakespeare: 8 layers, GQA 8/4) loaded on a one-thread CPU backend
// with room for 64-token windows, and a WindowLogits runner over it: the starting point of the compress
// tests that compare a transformed model's logits with the original's. XINFER_SOURCE_DIR names the source
// tree (CTest sets it); otherwise the working directory is taken for it.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "xinfer/engine/backend_factory.h"
#include "xinfer/engine/perplexity.h"
#include "xinfer/model/llama.h"

namespace xinfer::compress::test_support {

inline std::string bundled_model_dir() {
  const char* src = std::getenv("XINFER_SOURCE_DIR");
  return std::string(src ? src : ".") + "/models/xinfer-tiny-shakespeare";
}

struct BundledModel {
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<model::LlamaModel> model;
  std::unique_ptr<engine::WindowLogits> runner;  // windows of up to 64 tokens, block size 16
  BundledModel() {
    auto b = engine::create_backend(engine::BackendKind::kCpu, 1);
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    backend = std::move(*b);
    model::LoadOptions o;
    o.max_tokens = 64;
    o.max_logit_rows = 64;
    o.max_model_len = 64;
    o.show_progress = false;
    auto m = model::LlamaModel::load(bundled_model_dir(), *backend, o);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    model = std::move(*m);
    runner = std::make_unique<engine::WindowLogits>(*model, *backend, 64, 64, 16);
  }
};

}  // namespace xinfer::compress::test_support
