// Folding an adapter into its base model: W += scale * B @ A for every adapted layer of the
// denoiser, streamed one tensor at a time (read, fold in float32, cast back to the tensor's
// own dtype, write), into sharded safetensors with an index; every other file of the
// repository is hard-linked (or copied across file systems) so the output is a complete
// Diffusers repository. Torch-free interface.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace yeto::io {
class DiffusersRepo;
struct ResolvedRepo;
}

namespace yeto::artifacts {

// An --adapter-dir argument: "PATH" or "PATH:COMPONENT" (the denoiser the adapter is for). A
// PATH that exists as given is never split; COMPONENT is letters, digits and '_'.
struct AdapterArg {
  std::filesystem::path path;
  std::string component;  // empty: not chosen
};
AdapterArg parse_adapter_arg(const std::string& arg);

struct MergeOptions {
  std::string model;              // alias, org/name or directory
  std::string revision = "main";
  std::filesystem::path hub_cache;
  std::string variant;            // weight variant of the base to read ("" default)
  std::filesystem::path adapter;  // adapter directory or file (any layout read_adapter reads)
  // The denoiser the adapter is for (--adapter-dir DIR:COMPONENT); "" none: the record's, and
  // with several denoisers an adapter without a record is refused.
  std::string component;
  std::uint64_t max_shard_bytes = 2'000'000'000ull;
  std::filesystem::path output_dir;  // must not exist yet or be empty
};

struct MergedComponent {
  std::string component;  // "" for a one-model directory
  std::size_t modules = 0;
  std::vector<std::filesystem::path> shards;
  std::filesystem::path index;  // empty for a single file
  std::uint64_t total_bytes = 0;
};

struct MergeReport {
  std::vector<MergedComponent> components;
  std::size_t linked = 0, copied = 0;  // other files of the repository
  bool full = false;  // a full fine-tune's tensors were written (MergedComponent::modules counts them)
};

// Throws yeto::Error: bad_input when the adapter's recorded base model (id, commit or
// component content hash) differs from `model` (naming both), or a module does not fit;
// usage for an unusable output directory.
// `options.adapter` may also be a full fine-tune exported by `export` (yeto_full_weights.safetensors
// and its record): its tensors replace the base weights of the same names.
MergeReport merge_adapter(const MergeOptions& options);

// The identity of one component's content: SHA-256 over its config and weight files' names and
// SHA-256s (cached per process). `component` "" is a one-model directory.
std::string component_fingerprint(const io::DiffusersRepo& repo, const std::string& component);

// {"spec", "id", "revision", "commit", "path", "components": {name: fingerprint}} for the
// record of an adapter trained on `repo` (components: the denoisers the adapter touches).
nlohmann::json base_model_record(const std::string& spec, const io::ResolvedRepo& resolved, const io::DiffusersRepo& repo,
                                 const std::vector<std::string>& components);

// Every difference between an adapter's recorded base and `model` ("commit: adapter X, model
// Y"); empty when they agree or the record has no base.
std::vector<std::string> base_mismatches(const nlohmann::json& record, const io::ResolvedRepo& resolved,
                                         const io::DiffusersRepo& repo);

}  // namespace yeto::artifacts
