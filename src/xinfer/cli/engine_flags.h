// EngineFlags: the command-line face of engine::EngineConfig (and its SchedulerConfig), shared by every
// command that starts an Engine (`serve`, `bench`), so each tunable is spelled, documented and parsed
// once. A command sets its own defaults in `config` / `backend` before add_to(); they show in --help.
#pragma once

#include <string>

#include "xinfer/cli/flags.h"
#include "xinfer/engine/engine_config.h"

namespace xinfer::cli {

struct EngineFlags {
  engine::EngineConfig config;
  std::string backend = "cpu";                         // parsed into config.backend by finish()
  ByteSize kv_cache_memory{uint64_t{1} << 30};         // config.kv_cache_memory
  std::string kv_cache_dtype = "auto";                 // parsed into config.kv_cache_dtype by finish()
  std::string kv_cache_rotation = "auto";              // parsed into config.kv_cache_rotation by finish()
  bool enforce_eager = false;                          // !config.enable_cuda_graphs
  bool host_sampling = false;                          // !config.device_greedy && !config.device_sampling
  bool async_scheduling = true;                        // config.async_scheduling when given (else: auto)

  // Registers --backend --threads --tensor-parallel-size --kv-cache-memory --gpu-memory-utilization --max-model-len --block-size
  // --enforce-eager --host-sampling --device-sampling --async-scheduling --gemm-tuning --gemm-tuning-cache
  // --enable-prefix-caching
  // --max-num-seqs
  // --max-num-batched-tokens --decode-interval --reorder-window --min-decode-interval --max-decode-interval
  // --target-queue-time --target-step-time --prefill-tokens-per-decode --min-prefill-budget. The targets must
  // outlive `flags` parsing.
  void add_to(FlagSet& flags);
  // Copies the parsed values into `config`; INVALID_ARGUMENT for an unknown backend or a zero KV budget.
  Status finish();

 private:
  const FlagSet* flags_ = nullptr;  // add_to()'s, to tell a given --[no-]async-scheduling from the default
};

}  // namespace xinfer::cli
