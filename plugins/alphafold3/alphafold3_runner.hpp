// The AlphaFold 3 guard's logic, torch-free: what must hold before the official run_alphafold.py
// may run (the three YETO_ALPHAFOLD3_* folders, the model-parameter terms acknowledged in the run
// configuration, an input JSON), its command line, the run itself through the family kit's
// process runner, and what is collected afterwards. No training exists here by design.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "yeto/family/process.hpp"

namespace yeto::alphafold3 {

inline constexpr const char* kRootVar = "YETO_ALPHAFOLD3_ROOT";
inline constexpr const char* kParametersVar = "YETO_ALPHAFOLD3_MODEL_PARAMETERS_DIR";
inline constexpr const char* kDatabasesVar = "YETO_ALPHAFOLD3_DATABASES_DIR";
inline constexpr const char* kTermsKey = "alphafold3.accept_model_parameter_terms";
inline constexpr const char* kPythonKey = "alphafold3.python";
inline constexpr const char* kArgsKey = "alphafold3.args";

// Why nothing here trains, for every training hook's refusal.
std::string training_refusal(const std::string& hook);

// A precondition that does not hold; the message names the variable, key or file and what to do.
class Refusal : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Settings {
  bool accepted_terms = false;
  std::string python = "python3";
  std::vector<std::string> args;  // passed through to run_alphafold.py
};

// From the run configuration ({key: value}); keys that are absent keep their defaults. Throws
// Refusal for a value of the wrong type, an argument that is no --flag, or a flag Yeto sets.
Settings settings_from_config(const nlohmann::json& config);

struct Folders {
  std::filesystem::path root;        // holds run_alphafold.py
  std::filesystem::path parameters;  // the model parameters as received from Google
  std::filesystem::path databases;   // the genetic databases
};

using GetEnv = std::function<const char*(const char*)>;
// The three folders from the environment, each set, existing and a directory (the root holding
// run_alphafold.py); throws Refusal naming the first variable that is not.
Folders folders_from_environment(const GetEnv& getenv = [](const char* n) { return std::getenv(n); });

// What one sampling runs and where its files go:
//   <output_dir>/alphafold3/         run_alphafold.py's --output_dir (its job folders)
//   <output_dir>/run_alphafold.log   the program's stdout and stderr, after a header
//   <output_dir>/run_alphafold.json  {"argv", "exit_status", "signal", "started", "error", "outcome", "log",
//                                     "top_model"}
struct Run {
  std::filesystem::path output_dir, af3_output, log, record, json_path, cwd;
  std::vector<std::string> argv;
  std::vector<std::string> unset_env;
};

// Checks the terms, the folders and the input, then lays out the run. Refusal when the terms
// are not acknowledged, the input JSON is missing or the output directory is not empty.
Run plan_run(const Settings& settings, const Folders& folders, const std::filesystem::path& json_path,
             const std::filesystem::path& output_dir);

struct Outcome {
  family::ProcessResult process;
  std::filesystem::path top_model;  // the best-ranked model's mmCIF, "" when none was written
  std::size_t files = 0;            // files under the output directory
};

// Runs the plan (never throws for the program's own failure: the outcome and the record say it).
Outcome execute(const Run& run);

// The top-ranked model run_alphafold.py wrote: <job>/<job>_model.cif of the first job folder
// (sorted) that has one, "" when none has.
std::filesystem::path top_model(const std::filesystem::path& af3_output);

}  // namespace yeto::alphafold3
