#include "alphafold3_runner.hpp"

#include <algorithm>
#include <fstream>
#include <set>

namespace yeto::alphafold3 {
namespace {

namespace fs = std::filesystem;

// The flags that tell run_alphafold.py where things are: Yeto sets them.
const std::set<std::string> kReserved = {"json_path", "input_dir", "model_dir", "db_dir", "output_dir"};

void write_file(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw std::runtime_error("cannot write " + tmp.string());
  }
  fs::rename(tmp, path);
}

std::string quoted(const std::string& a) {
  if (!a.empty() && a.find_first_of(" \t\n'\"\\$`*?[]{}()<>|&;#~") == std::string::npos) return a;
  std::string out = "'";
  for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string training_refusal(const std::string& hook) {
  return "alphafold3: " + hook +
         ": AlphaFold 3 is not trained here, by design. Its model parameters are available only under Google's terms "
         "of use (WEIGHTS_TERMS_OF_USE.md of google-deepmind/alphafold3): non-commercial use only, no use of the "
         "model or its outputs to train other models, and the parameters used only as received directly from Google "
         "(no modified or redistributed copies). Yeto therefore offers AlphaFold 3 for sampling only (`yeto-host "
         "sample`, which runs the official run_alphafold.py); to fine-tune a structure model, use Protenix (the "
         "protenix plugin: Apache-2.0 code and weights).";
}

Settings settings_from_config(const nlohmann::json& config) {
  Settings s;
  if (!config.is_object()) return s;
  if (const auto it = config.find(kTermsKey); it != config.end() && !it->is_null()) {
    if (!it->is_boolean()) throw Refusal(std::string(kTermsKey) + " must be true or false, got " + it->dump());
    s.accepted_terms = it->get<bool>();
  }
  if (const auto it = config.find(kPythonKey); it != config.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>().empty())
      throw Refusal(std::string(kPythonKey) + " must name a Python interpreter, got " + it->dump());
    s.python = it->get<std::string>();
  }
  if (const auto it = config.find(kArgsKey); it != config.end() && !it->is_null()) {
    if (!it->is_array()) throw Refusal(std::string(kArgsKey) + " must be a list of --flag=value strings, got " + it->dump());
    for (const auto& a : *it) {
      if (!a.is_string()) throw Refusal(std::string(kArgsKey) + ": " + a.dump() + " is not a string");
      const std::string arg = a.get<std::string>();
      if (arg.size() < 3 || arg.compare(0, 2, "--") != 0)
        throw Refusal(std::string(kArgsKey) + ": '" + arg + "' is not a run_alphafold.py flag (--name=value or --name)");
      std::string name = arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
      if (name.rfind("no", 0) == 0 && kReserved.count(name.substr(2))) name = name.substr(2);
      if (kReserved.count(name))
        throw Refusal(std::string(kArgsKey) + ": '" + arg + "': Yeto sets --" + name +
                      " itself (--json_path from --prompt, --model_dir from $" + kParametersVar + ", --db_dir from $" +
                      kDatabasesVar + ", --output_dir under the sample's output); drop it");
      s.args.push_back(arg);
    }
  }
  return s;
}

Folders folders_from_environment(const GetEnv& getenv) {
  auto folder = [&](const char* var, const std::string& what) {
    const char* v = getenv(var);
    if (!v || !*v)
      throw Refusal("$" + std::string(var) + " is not set: export it as the folder of " + what +
                    " (AlphaFold 3 is never downloaded or installed by Yeto)");
    std::error_code ec;
    const fs::path p = fs::absolute(v, ec);
    if (!fs::is_directory(p, ec)) throw Refusal("$" + std::string(var) + " = " + v + " is not a directory (" + what + ")");
    return p;
  };
  Folders f;
  f.root = folder(kRootVar, "a checkout of google-deepmind/alphafold3 holding run_alphafold.py");
  std::error_code ec;
  if (!fs::is_regular_file(f.root / "run_alphafold.py", ec))
    throw Refusal("$" + std::string(kRootVar) + " = " + f.root.string() +
                  " holds no run_alphafold.py: point it at the alphafold3 checkout");
  f.parameters = folder(kParametersVar, "the AlphaFold 3 model parameters as received from Google");
  f.databases = folder(kDatabasesVar, "AlphaFold 3's genetic databases (fetch_databases.sh)");
  return f;
}

Run plan_run(const Settings& settings, const Folders& folders, const fs::path& json_path, const fs::path& output_dir) {
  if (!settings.accepted_terms)
    throw Refusal(std::string("the AlphaFold 3 model-parameter terms are not acknowledged: set ") + kTermsKey +
                  " = true (in the run file's [alphafold3] section, or --set " + kTermsKey +
                  "=true) once you have received the parameters directly from Google and accept their terms of use "
                  "(non-commercial use only, no training on the outputs, no redistribution)");
  std::error_code ec;
  if (json_path.empty() || !fs::is_regular_file(json_path, ec))
    throw Refusal("the prompt must be the path of an AlphaFold 3 input JSON file (--prompt fold_input.json); '" +
                  json_path.string() + "' is no file");
  if (output_dir.empty())
    throw Refusal("the host gave no output directory (write the sample as a .cif or .pdb file)");
  Run r;
  r.output_dir = fs::absolute(output_dir);
  if (fs::exists(r.output_dir, ec) && !(fs::is_directory(r.output_dir, ec) && fs::is_empty(r.output_dir, ec)))
    throw Refusal("the output folder " + r.output_dir.string() +
                  " exists and is not empty: choose another --output or remove it (runs are not mixed)");
  r.af3_output = r.output_dir / "alphafold3";
  r.log = r.output_dir / "run_alphafold.log";
  r.record = r.output_dir / "run_alphafold.json";
  r.json_path = fs::absolute(json_path);
  r.cwd = folders.root;
  r.argv = {settings.python,
            (folders.root / "run_alphafold.py").string(),
            "--json_path=" + r.json_path.string(),
            "--model_dir=" + folders.parameters.string(),
            "--db_dir=" + folders.databases.string(),
            "--output_dir=" + r.af3_output.string()};
  r.argv.insert(r.argv.end(), settings.args.begin(), settings.args.end());
  // run_alphafold.py has no use for Yeto's own variables (a run secret among them); the three
  // folders stay visible.
  r.unset_env = {"YETO_*"};
  return r;
}

fs::path top_model(const fs::path& af3_output) {
  std::error_code ec;
  if (!fs::is_directory(af3_output, ec)) return {};
  std::vector<fs::path> jobs;
  for (const auto& e : fs::directory_iterator(af3_output, ec))
    if (e.is_directory()) jobs.push_back(e.path());
  std::sort(jobs.begin(), jobs.end());
  for (const auto& job : jobs) {
    const fs::path model = job / (job.filename().string() + "_model.cif");
    if (fs::is_regular_file(model, ec)) return model;
  }
  return {};
}

Outcome execute(const Run& run) {
  fs::create_directories(run.output_dir);
  family::ProcessOptions o;
  o.argv = run.argv;
  o.cwd = run.cwd;
  o.log = run.log;
  o.unset_env = run.unset_env;
  for (const char* var : {kRootVar, kParametersVar, kDatabasesVar})
    if (const char* v = std::getenv(var)) o.env[var] = v;
  o.env["PYTHONUNBUFFERED"] = "1";  // the log keeps up with the program
  std::string header = "# yeto alphafold3: in " + run.cwd.string() + "\n#";
  for (const auto& a : run.argv) header += " " + quoted(a);
  write_file(run.log, header + "\n");
  Outcome out;
  out.process = family::run_process(o);
  out.top_model = top_model(run.af3_output);
  nlohmann::json record = {{"argv", run.argv},
                           {"cwd", run.cwd.string()},
                           {"started", out.process.started},
                           {"exit_status", out.process.exit_status},
                           {"signal", out.process.signal},
                           {"error", out.process.error},
                           {"outcome", family::describe(out.process)},
                           {"log", run.log.filename().string()},
                           {"output_dir", run.af3_output.filename().string()},
                           {"top_model", out.top_model.empty() ? nlohmann::json(nullptr)
                                                               : nlohmann::json(fs::relative(out.top_model, run.output_dir).string())}};
  write_file(run.record, record.dump(2) + "\n");
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(run.output_dir, ec))
    if (e.is_regular_file()) ++out.files;
  return out;
}

}  // namespace yeto::alphafold3
