// The one table of built-in model aliases: alias -> hub id and model family. Which plugin
// serves a model is the plugins' own business (their manifests declare aliases and pipeline
// classes; plugin::select_plugin). docs/MODELS.md is generated from it (`yeto-host inspect --aliases --markdown`)
// and a test keeps the two in sync.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "io/hub.hpp"

namespace yeto::io {

struct ModelAlias {
  std::string alias;
  std::string hub_id;
  std::string family;  // model family: flux, sd35, ltx, wan, pixart, hunyuan3d, nava
  std::string description;
};

const std::vector<ModelAlias>& model_aliases();
const ModelAlias* find_alias(std::string_view name);
std::vector<std::string> alias_names();
// The Markdown table docs/MODELS.md holds between its generated-table markers.
std::string aliases_markdown();

// A model as the user names it: a built-in alias, an org/name id or a local directory.
struct ResolvedModel {
  ResolvedRepo repo;
  const ModelAlias* alias = nullptr;  // when the spec was an alias
  std::string spec;                   // as given
};
ResolvedModel resolve_model(const std::string& spec, const std::string& revision, const HubCache& cache);

}  // namespace yeto::io
