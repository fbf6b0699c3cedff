#include "fleet/planner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <toml++/toml.h>

#include "config/schema.hpp"
#include "core/error.hpp"
#include "fleet/fleet.hpp"

namespace yeto::fleet {

namespace {

std::string gb(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f GB", bytes / 1e9);
  return b;
}

std::string money(double d) {
  char b[32];
  std::snprintf(b, sizeof b, "$%.2f/h", d);
  return b;
}

}  // namespace

// ---- the table -----------------------------------------------------------------------------------

std::vector<GpuType> parse_gpu_table(const std::string& text, const std::string& where) {
  toml::table doc;
  try {
    doc = toml::parse(text, where);
  } catch (const toml::parse_error& e) {
    throw UsageError(where + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
  const toml::array* arr = doc["gpu"].as_array();
  if (arr == nullptr || arr->empty())
    throw UsageError(where + ": no GPU types: give one [[gpu]] table per type (name, memory_gb, price, tflops)");
  for (const auto& [k, v] : doc)
    if (k.str() != "gpu") throw UsageError(where + ": unknown key '" + std::string(k.str()) + "' (expected [[gpu]] tables)");
  std::vector<GpuType> out;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const std::string at = where + ": gpu[" + std::to_string(i) + "]";
    const toml::table* t = (*arr)[i].as_table();
    if (t == nullptr) throw UsageError(at + " must be a table");
    GpuType g;
    auto number = [&](const char* key, bool required, double lo) -> double {
      const auto node = (*t)[key];
      if (!node) {
        if (required) throw UsageError(at + ": '" + key + "' is missing");
        return 0;
      }
      std::optional<double> v = node.value<double>();
      if (!v || *v < lo || !std::isfinite(*v))
        throw UsageError(at + ": '" + key + "' must be a number >= " + std::to_string(static_cast<int>(lo)));
      return *v;
    };
    for (const auto& [k, v] : *t) {
      const std::string key(k.str());
      static const std::vector<std::string> known{"name",   "memory_gb", "price",        "spot_price",
                                                 "tflops", "regions",   "max_per_node", "host_memory_gb"};
      if (std::find(known.begin(), known.end(), key) == known.end())
        throw UsageError(at + ": unknown key '" + key + "' (expected name, memory_gb, price, spot_price, tflops, regions, max_per_node, "
                         "host_memory_gb)");
    }
    const auto name = (*t)["name"].value<std::string>();
    if (!name || name->empty()) throw UsageError(at + ": 'name' must be the accelerator's name (H100, A100-80GB, L4, ...)");
    g.name = *name;
    g.memory_gb = number("memory_gb", true, 0);
    if (g.memory_gb <= 0) throw UsageError(at + " (" + g.name + "): 'memory_gb' must be > 0");
    g.price = number("price", true, 0);
    g.spot_price = number("spot_price", false, 0);
    g.tflops = number("tflops", true, 0);
    g.host_memory_gb = number("host_memory_gb", false, 0);
    if (g.tflops <= 0) throw UsageError(at + " (" + g.name + "): 'tflops' must be > 0");
    if ((*t)["max_per_node"]) {
      const auto m = (*t)["max_per_node"].value<std::int64_t>();
      if (!m || *m < 1 || *m > 64) throw UsageError(at + " (" + g.name + "): 'max_per_node' must be an integer 1 .. 64");
      g.max_per_node = static_cast<int>(*m);
    }
    if (const auto node = (*t)["regions"]) {
      const toml::array* r = node.as_array();
      if (r == nullptr) throw UsageError(at + " (" + g.name + "): 'regions' must be an array of \"cloud[:region]\" strings");
      for (const auto& x : *r) {
        const auto s = x.value<std::string>();
        if (!s || s->empty()) throw UsageError(at + " (" + g.name + "): 'regions' must be an array of \"cloud[:region]\" strings");
        g.regions.push_back(*s);
      }
    }
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<GpuType> read_gpu_table(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(file.string() + ": cannot read the GPU table", ExitCode::not_found);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_gpu_table(ss.str(), file.string());
}

// ---- shapes ----------------------------------------------------------------------------------------

std::string Config::label() const {
  std::vector<std::string> parts;
  parts.push_back(run.storage == "fp8" ? "fp8" : "bf16");
  if (run.checkpointing || run.fsdp_ranks > 1) parts.push_back("checkpointing");
  if (run.fsdp_ranks > 1) parts.push_back("fsdp " + std::to_string(run.fsdp_ranks));
  if (run.block_swap > 0) parts.push_back("block swap " + std::to_string(run.block_swap));
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : ", ") + p;
  return s;
}

double Shape::price() const { return price_per_gpu * per_node; }
double Shape::tflops() const { return chosen ? gpu.tflops * per_node / chosen->cost : 0; }
std::string Shape::name() const { return std::to_string(per_node) + "x" + gpu.name; }

std::string Shape::island_spec() const {
  std::string cloud = "default", region;
  if (!gpu.regions.empty()) {
    const std::string& r = gpu.regions.front();
    const auto c = r.find(':');
    cloud = c == std::string::npos ? r : r.substr(0, c);
    if (c != std::string::npos) region = r.substr(c + 1);
  }
  return cloud + ":" + name() + (region.empty() ? "" : "@" + region);
}

double FleetPlan::price() const { return chosen ? chosen->price() * islands : 0; }
double FleetPlan::tflops() const { return chosen ? chosen->tflops() * islands : 0; }

namespace {

// The fastest configuration of one shape that fits, and the faster ones that did not.
Shape size_shape(const memory::Inventory& inv, const memory::RunShape& base, const GpuType& gpu, int per_node,
                 const PlanOptions& o) {
  Shape s;
  s.gpu = gpu;
  s.per_node = per_node;
  const double usable = o.headroom * gpu.memory_gb * 1e9;
  // The node's memory holds every rank's host side (the process, swapped blocks).
  const double host_usable = gpu.host_memory_gb > 0 ? o.headroom * gpu.host_memory_gb * 1e9 : 0;
  const auto host_fits = [&](const memory::Breakdown& e) { return host_usable <= 0 || e.host_bytes * per_node <= host_usable; };
  memory::RunShape ref = base;
  ref.storage = "auto";
  ref.block_swap = 0;
  ref.fsdp_ranks = 1;
  const double bf16_blocks = memory::estimate(inv, ref).blocks_bytes;
  struct Tried {
    Config c;
    bool fits;
  };
  std::vector<Tried> tried;
  for (const char* storage : {"auto", "fp8"})
    for (const bool ckpt : {false, true})
      for (const int fsdp : {1, per_node}) {
        if (fsdp > 1 && !ckpt) continue;  // fsdp checkpoints every sharded block
        memory::RunShape r = base;
        r.storage = storage;
        r.checkpointing = ckpt;
        r.checkpointing_every = 1;
        r.fsdp_ranks = fsdp;
        r.block_swap = 0;
        double cost = (r.storage == "fp8" ? o.cost_fp8 : 1.0) * (ckpt ? o.cost_checkpointing : 1.0) *
                      (fsdp > 1 ? o.cost_fsdp : 1.0);
        memory::Breakdown e = memory::estimate(inv, r);
        if (e.device_bytes > usable) {
          // The fewest blocks swapped that fit.
          tried.push_back({{r, e, cost}, false});
          for (int n = 1; n <= e.blocks; ++n) {
            memory::RunShape rs = r;
            rs.block_swap = n;
            const memory::Breakdown es = memory::estimate(inv, rs);
            if (es.device_bytes <= usable && host_fits(es)) {
              const double swapped = e.blocks > 0 ? e.blocks_bytes * n / static_cast<double>(e.blocks) : 0;
              const double c = cost * (1.0 + o.cost_swap * (bf16_blocks > 0 ? swapped / bf16_blocks : 0));
              tried.push_back({{rs, es, c}, true});
              break;
            }
            if (n == e.blocks) tried.push_back({{rs, es, cost * (1.0 + o.cost_swap)}, false});
          }
        } else {
          tried.push_back({{r, e, cost}, host_fits(e)});
        }
        if (per_node == 1) break;  // fsdp over one rank is the plain run
      }
  std::stable_sort(tried.begin(), tried.end(), [](const Tried& a, const Tried& b) { return a.c.cost < b.c.cost; });
  for (const auto& t : tried) {
    if (t.fits) {
      s.chosen = t.c;
      break;
    }
    if (t.c.estimate.device_bytes <= usable)
      s.rejected.push_back(t.c.label() + ": needs " + gb(t.c.estimate.host_bytes * per_node) + " of host memory, " +
                           gb(host_usable) + " usable on the node");
    else
      s.rejected.push_back(t.c.label() + ": needs " + gb(t.c.estimate.device_bytes) + " of " + gb(usable));
  }
  return s;
}

}  // namespace

FleetPlan plan_fleet(const memory::Inventory& inv, const memory::RunShape& base_in, const std::vector<GpuType>& gpus,
                     const PlanOptions& o) {
  if (gpus.empty()) throw UsageError("launch plan: the GPU table has no GPU types");
  memory::RunShape base = base_in;
  base.backend = memory::Backend::cuda;
  FleetPlan plan;
  struct Option {
    Shape shape;
    int islands;
  };
  std::vector<Option> options;
  for (const auto& g : gpus) {
    std::vector<int> counts;
    for (int c = 1; c <= g.max_per_node; c *= 2) counts.push_back(c);
    if (counts.back() != g.max_per_node) counts.push_back(g.max_per_node);
    for (const int c : counts) {
      Shape s = size_shape(inv, base, g, c, o);
      s.price_per_gpu = o.spot && g.spot_price > 0 ? g.spot_price : g.price;
      if (!s.chosen) {
        const std::string leanest = s.rejected.empty() ? std::string("no configuration") : s.rejected.back();
        plan.rejected.push_back({s.name(), "does not fit " + std::to_string(static_cast<int>(g.memory_gb)) +
                                               " GB per GPU even at the leanest configuration (" + leanest + ")"});
        continue;
      }
      plan.fitting.push_back(s);
      int k = 1;
      if (o.flops > 0) {
        k = static_cast<int>(std::ceil(o.flops / s.tflops() - 1e-9));
        if (k > o.max_islands) {
          plan.rejected.push_back({s.name(), "would need " + std::to_string(k) + " islands for " +
                                                 std::to_string(static_cast<int>(o.flops)) + " TFLOPs (at most " +
                                                 std::to_string(o.max_islands) + ")"});
          continue;
        }
        if (o.budget > 0 && k * s.price() > o.budget + 1e-9) {
          plan.rejected.push_back({s.name(), std::to_string(k) + " islands for the TFLOPs target cost " +
                                                 money(k * s.price()) + ", over the budget of " + money(o.budget)});
          continue;
        }
      } else if (o.budget > 0) {
        k = std::min(o.max_islands, static_cast<int>(std::floor(o.budget / s.price() + 1e-9)));
        if (k < 1) {
          plan.rejected.push_back({s.name(), "one island costs " + money(s.price()) + ", over the budget of " + money(o.budget)});
          continue;
        }
      }
      options.push_back({s, k});
    }
  }
  std::stable_sort(plan.fitting.begin(), plan.fitting.end(),
                   [](const Shape& a, const Shape& b) { return a.price() < b.price(); });
  const auto better = [&](const Option& a, const Option& b) {
    const double pa = a.shape.price() * a.islands, pb = b.shape.price() * b.islands;
    const double ta = a.shape.tflops() * a.islands, tb = b.shape.tflops() * b.islands;
    if (o.flops <= 0 && o.budget > 0) {
      if (std::abs(ta - tb) > 1e-9 * std::max(ta, tb)) return ta > tb;
      return pa < pb;
    }
    if (std::abs(pa - pb) > 1e-9 * std::max(pa, pb)) return pa < pb;
    return ta > tb;
  };
  for (const auto& opt : options)
    if (!plan.chosen || better(opt, {*plan.chosen, plan.islands})) {
      plan.chosen = opt.shape;
      plan.islands = opt.islands;
    }
  return plan;
}

std::string describe_plan(const FleetPlan& plan, const PlanOptions& o) {
  std::ostringstream out;
  char line[256];
  if (plan.chosen) {
    const Shape& s = *plan.chosen;
    out << "plan: " << plan.islands << (plan.islands == 1 ? " island" : " islands") << " of " << s.name() << " ("
        << s.chosen->label() << "), " << money(plan.price()) << (o.spot && s.gpu.spot_price > 0 ? " on spot" : " on demand")
        << ", " << static_cast<long>(plan.tflops()) << " effective TFLOPs";
    if (o.flops > 0) out << " (target " << static_cast<long>(o.flops) << ")";
    if (o.budget > 0) out << " (budget " << money(o.budget) << ")";
    out << "\n  per GPU: expected peak " << gb(s.chosen->estimate.device_bytes) << " of " << s.gpu.memory_gb << " GB ("
        << gb(o.headroom * s.gpu.memory_gb * 1e9) << " usable); host: " << gb(s.chosen->estimate.host_bytes) << "\n";
    for (const auto& p : s.chosen->estimate.parts) {
      if (p.device_bytes + p.host_bytes <= 0) continue;
      std::snprintf(line, sizeof line, "    %-32s device %9s   host %9s\n", p.name.c_str(), gb(p.device_bytes).c_str(),
                    gb(p.host_bytes).c_str());
      out << line;
    }
    for (const auto& r : s.rejected) out << "  not " << r << "\n";
  } else {
    out << "plan: no island shape fits";
    if (o.budget > 0) out << " within " << money(o.budget);
    out << "\n";
  }
  if (!plan.fitting.empty()) {
    out << "shapes that fit (per island):\n";
    for (const auto& s : plan.fitting) {
      std::snprintf(line, sizeof line, "  %-16s %-40s %10s %8.0f TFLOPs  peak %s\n", s.name().c_str(),
                    s.chosen->label().c_str(), money(s.price()).c_str(), s.tflops(),
                    gb(s.chosen->estimate.device_bytes).c_str());
      out << line;
    }
  }
  if (!plan.rejected.empty()) {
    out << "rejected:\n";
    for (const auto& r : plan.rejected) out << "  " << r.shape << ": " << r.reason << "\n";
  }
  return out.str();
}

namespace {

nlohmann::json shape_json(const Shape& s) {
  const memory::RunShape& r = s.chosen->run;
  return {{"shape", s.name()},
          {"island", s.island_spec()},
          {"gpu", s.gpu.name},
          {"per_node", s.per_node},
          {"config", s.chosen->label()},
          {"storage", r.storage == "fp8" ? "fp8" : "bf16"},
          {"checkpointing", r.checkpointing || r.fsdp_ranks > 1},
          {"block_swap", r.block_swap},
          {"fsdp_ranks", r.fsdp_ranks},
          {"device_bytes", s.chosen->estimate.device_bytes},
          {"host_bytes", s.chosen->estimate.host_bytes},
          {"price_per_h", s.price()},
          {"tflops", s.tflops()},
          {"rejected", s.rejected}};
}

}  // namespace

nlohmann::json plan_json(const FleetPlan& plan) {
  nlohmann::json j;
  j["chosen"] = nullptr;
  if (plan.chosen) {
    j["chosen"] = shape_json(*plan.chosen);
    j["chosen"]["islands"] = plan.islands;
    j["price_per_h"] = plan.price();
    j["tflops"] = plan.tflops();
  }
  j["fitting"] = nlohmann::json::array();
  for (const auto& s : plan.fitting) j["fitting"].push_back(shape_json(s));
  j["rejected"] = nlohmann::json::array();
  for (const auto& r : plan.rejected) j["rejected"].push_back({{"shape", r.shape}, {"reason", r.reason}});
  return j;
}

std::vector<std::string> launch_line(const FleetPlan& plan, const std::string& config_file, const std::string& engine) {
  if (!plan.chosen) return {};
  const Shape& s = *plan.chosen;
  const memory::RunShape& r = s.chosen->run;
  std::vector<std::string> a{"yeto-host", "launch", "up"};
  if (!config_file.empty()) a.insert(a.end(), {"--config", config_file});
  a.insert(a.end(), {"--engine", engine});
  for (int i = 0; i < plan.islands; ++i) a.insert(a.end(), {"--gpu", s.island_spec()});
  a.insert(a.end(), {"--set", "model.storage=" + std::string(r.storage == "fp8" ? "fp8" : "auto")});
  a.insert(a.end(), {"--set", std::string("train.activation_checkpointing=") + (r.checkpointing ? "true" : "false")});
  if (s.per_node > 1) {
    a.insert(a.end(), {"--set", std::string("train.shard=") + (r.fsdp_ranks > 1 ? "fsdp" : "ddp")});
    a.insert(a.end(), {"--set", "train.island_ranks=" + std::to_string(s.per_node)});
  }
  if (r.block_swap > 0 || config::find_key("model.block_swap") != nullptr)
    a.insert(a.end(), {"--set", "model.block_swap=" + std::to_string(r.block_swap)});
  return a;
}

}  // namespace yeto::fleet
