#include "data/manifest.hpp"

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"
#include "data/base64.hpp"
#include "data/paths.hpp"
#include "data/tensor_ref.hpp"

namespace yeto::data {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& msg) { throw Error(msg, ExitCode::bad_input); }

std::string type_name(const json& v) { return v.type_name(); }

fs::path resolve_existing(const PathPolicy& policy, const std::string& field, const std::string& text) {
  const ResolvedPath r = resolve_manifest_path(policy, text);
  if (!r.ok()) bad("field '" + field + "': " + r.error);
  std::error_code ec;
  if (!fs::exists(r.path, ec))
    bad("field '" + field + "': file not found: " + r.path.string() + " (relative paths resolve from the manifest's directory " +
        policy.root.string() + "); fix the path or remove the row");
  return r.path;
}

std::int64_t positive_int(const json& v, const std::string& field) {
  if (!v.is_number_integer() && !(v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<std::int64_t>(v.get<double>()))))
    bad("field '" + field + "' must be a positive integer, got " + type_name(v) + " " + v.dump());
  const auto n = v.is_number_integer() ? v.get<std::int64_t>() : static_cast<std::int64_t>(v.get<double>());
  if (n <= 0) bad("field '" + field + "' must be a positive integer, got " + std::to_string(n));
  return n;
}

void parse_image(Row& row, const json& v, const std::string& field, const PathPolicy& policy) {
  row.media = MediaKind::image;
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (starts_with(s, "data:")) {
      const auto comma = s.find(',');
      if (comma == std::string::npos || s.substr(0, comma).find(";base64") == std::string::npos)
        bad("field '" + field + "': a data: URI must be base64 (data:image/png;base64,...)");
      auto bytes = base64_decode(std::string_view(s).substr(comma + 1));
      if (!bytes) bad("field '" + field + "': the data: URI is not valid base64");
      row.inline_image = std::move(*bytes);
      row.media_ref = "inline:" + std::to_string(row.inline_image.size()) + "B";
      return;
    }
    row.media_path = resolve_existing(policy, field, s);
    row.media_ref = s;
    return;
  }
  if (v.is_object()) {
    // The Hugging Face `Image` feature as JSON: {"bytes": <base64 or null>, "path": <str or null>}.
    if (auto b = v.find("bytes"); b != v.end() && !b->is_null()) {
      if (!b->is_string()) bad("field '" + field + ".bytes' must be a base64 string, got " + type_name(*b));
      auto bytes = base64_decode(b->get<std::string>());
      if (!bytes) bad("field '" + field + ".bytes' is not valid base64");
      row.inline_image = std::move(*bytes);
      row.media_ref = "inline:" + std::to_string(row.inline_image.size()) + "B";
      return;
    }
    if (auto p = v.find("path"); p != v.end() && p->is_string()) {
      row.media_path = resolve_existing(policy, field + ".path", p->get<std::string>());
      row.media_ref = p->get<std::string>();
      return;
    }
    bad("field '" + field + "' is an object without \"bytes\" (base64) or \"path\"");
  }
  bad("field '" + field + "' must be a path, a data: URI or {\"bytes\": <base64>}, got " + type_name(v));
}

void parse_video(Row& row, const json& v, const std::string& field, const PathPolicy& policy) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    const fs::path p = resolve_existing(policy, field, s);
    row.media_ref = s;
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      row.media = MediaKind::frames;
      row.media_path = p;
      for (const auto& f : list_files_naturally(p))
        if (is_image_extension(lower_extension(f))) row.frame_paths.push_back(f);
      if (row.frame_paths.empty()) bad("field '" + field + "': frames directory " + p.string() + " holds no image files");
    } else {
      row.media = MediaKind::video;
      row.media_path = p;
    }
    return;
  }
  if (v.is_array()) {
    row.media = MediaKind::frames;
    if (v.empty()) bad("field '" + field + "' is an empty list of frames");
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::string f = field + "[" + std::to_string(i) + "]";
      if (!v[i].is_string()) bad("field '" + f + "' must be an image path, got " + type_name(v[i]));
      row.frame_paths.push_back(resolve_existing(policy, f, v[i].get<std::string>()));
    }
    row.media_ref = v.dump();
    return;
  }
  bad("field '" + field + "' must be a video path, a frames directory or a list of image paths, got " + type_name(v));
}

}  // namespace

std::string RowError::str() const {
  return manifest.string() + (jsonl ? " line " : " row ") + std::to_string(number) + ": " + message;
}

Row parse_row(const json& v, const DataOptions& o, const fs::path& manifest) {
  if (!v.is_object()) bad("row is a JSON " + type_name(v) + ", expected an object with the row's fields");
  const PathPolicy policy{manifest.parent_path(), o.allow_path_escape};
  const Columns& c = o.columns;
  Row row;
  row.manifest = manifest;
  auto field = [&](const std::string& name) -> const json* {
    if (name.empty()) return nullptr;
    auto it = v.find(name);
    return it == v.end() || it->is_null() ? nullptr : &*it;
  };

  const json* image = field(c.image);
  const json* video = field(c.video);
  const json* latents = field(c.latents);
  const json* file_name = (!image && !video && !latents) ? field("file_name") : nullptr;
  const int media_count = (image ? 1 : 0) + (video ? 1 : 0) + (latents ? 1 : 0);
  if (media_count > 1) {
    std::vector<std::string> present;
    if (image) present.push_back("'" + c.image + "'");
    if (video) present.push_back("'" + c.video + "'");
    if (latents) present.push_back("'" + c.latents + "'");
    bad("row has more than one media source (" + join(present, ", ") + "); keep exactly one per row");
  }
  if (image) parse_image(row, *image, c.image, policy);
  else if (video) parse_video(row, *video, c.video, policy);
  else if (latents) {
    row.media = MediaKind::latents;
    row.latents = parse_tensor_ref(*latents, c.latents, policy);
    row.media_ref = latents->is_string() ? latents->get<std::string>() : "inline";
  } else if (file_name) {
    // The Hugging Face imagefolder/videofolder convention (metadata.jsonl with file_name).
    if (!file_name->is_string()) bad("field 'file_name' must be a path, got " + type_name(*file_name));
    const std::string e = lower_extension(file_name->get<std::string>());
    if (is_video_extension(e)) parse_video(row, *file_name, "file_name", policy);
    else parse_image(row, *file_name, "file_name", policy);
  } else {
    bad("row has no media: expected an image ('" + c.image + "'), a video ('" + c.video + "') or cached latents ('" + c.latents +
        "'); set data.image_column / data.video_column / data.latent_column if your manifest names them differently");
  }

  if (const json* p = field(c.prompt)) {
    if (!p->is_string()) bad("field '" + c.prompt + "' must be a string, got " + type_name(*p));
    row.prompt = p->get<std::string>();
  }
  if (const json* t = field(c.prompt_embeds)) row.prompt_embeds = parse_tensor_ref(*t, c.prompt_embeds, policy);
  if (const json* t = field(c.attention_mask)) row.attention_mask = parse_tensor_ref(*t, c.attention_mask, policy);
  if (const json* t = field(c.pooled_embeds)) row.pooled_embeds = parse_tensor_ref(*t, c.pooled_embeds, policy);
  if (!row.prompt && !row.prompt_embeds)
    bad("row has no conditioning: expected a prompt ('" + c.prompt + "') or cached text embeddings ('" + c.prompt_embeds +
        "'); use \"\" for an unconditional row, or set data.prompt_column if the caption is under another name");
  if ((row.attention_mask || row.pooled_embeds) && !row.prompt_embeds)
    bad("row has a cached attention mask or pooled embeddings but no '" + c.prompt_embeds + "'");

  if (const json* a = field(c.audio)) {
    if (!a->is_string() || a->get<std::string>().empty())
      bad("field '" + c.audio + "' must be the path of a sound file (or a video with sound), got " + a->dump());
    if (row.media != MediaKind::video && row.media != MediaKind::frames)
      bad("field '" + c.audio + "' belongs to a video row (its frames choose the stretch of sound), but this row holds " +
          std::string(row.media == MediaKind::latents ? "cached latents (cache its sound as a tensor too)" : "an image"));
    row.audio_path = resolve_existing(policy, c.audio, a->get<std::string>());
  }
  if (const json* t = field("tensors")) {
    if (!t->is_object()) bad("field 'tensors' must be an object {name: tensor}, got " + type_name(*t));
    for (const auto& [name, value] : t->items()) row.tensors[name] = parse_tensor_ref(value, "tensors." + name, policy);
  }
  for (const auto& [name, value] : v.items()) {
    if (value.is_string() && !row.tensors.count(name) && name != c.latents && name != c.prompt_embeds &&
        name != c.attention_mask && name != c.pooled_embeds && name != c.image && name != c.video && name != c.audio &&
        name != "file_name" &&
        is_tensor_extension(lower_extension(fs::path(value.get<std::string>().substr(0, value.get<std::string>().find('#')))))) {
      row.tensors[name] = parse_tensor_ref(value, name, policy);
    }
    if (starts_with(name, "latent_") && !value.is_null()) row.latent_meta[name] = positive_int(value, name);
  }

  if (const json* f = field("frames")) row.frames = positive_int(*f, "frames");
  if (const json* f = field("height")) row.height = positive_int(*f, "height");
  if (const json* f = field("width")) row.width = positive_int(*f, "width");
  if (const json* f = field("fps")) {
    if (!f->is_number() || f->get<double>() <= 0) bad("field 'fps' must be a positive number, got " + f->dump());
    row.fps = f->get<double>();
  }
  if (row.media == MediaKind::image && row.frames && *row.frames != 1)
    bad("field 'frames' is " + std::to_string(*row.frames) + " but the row holds an image (1 frame)");
  return row;
}

Manifest read_manifest(const ResolvedSource& source, const DataOptions& o) {
  Manifest m;
  m.source = source;
  const std::string text = read_file(source.manifest);
  auto add_row = [&](const json& value, std::int64_t number) {
    ++m.total_rows;
    try {
      Row r = parse_row(value, o, source.manifest);
      r.number = number;
      r.jsonl = source.jsonl;
      m.rows.push_back(std::move(r));
    } catch (const Error& e) {
      m.errors.push_back({source.manifest, number, source.jsonl, e.what()});
    }
  };
  if (source.jsonl) {
    std::int64_t line_no = 0;
    std::size_t pos = 0;
    while (pos <= text.size()) {
      std::size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      ++line_no;
      std::string_view line(text.data() + pos, end - pos);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      pos = end + 1;
      if (trim(line).empty()) {
        if (end == text.size()) break;
        continue;
      }
      json value;
      try {
        value = json::parse(line);
      } catch (const json::parse_error& e) {
        ++m.total_rows;
        const bool at_end = e.byte >= line.size();
        m.errors.push_back({source.manifest, line_no, true,
                            std::string(at_end ? "truncated or incomplete JSON" : "invalid JSON") + " (column " +
                                std::to_string(e.byte) + "): " + e.what() +
                                "; each line must hold one complete JSON object"});
        continue;
      }
      add_row(value, line_no);
      if (end == text.size()) break;
    }
    return m;
  }
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    std::size_t line = 1;
    for (std::size_t i = 0; i < e.byte && i < text.size(); ++i) line += text[i] == '\n';
    throw Error(source.manifest.string() + ":" + std::to_string(line) + ": invalid JSON manifest: " + e.what() +
                    "; fix the file, or write it as JSON Lines (.jsonl) so one bad row does not hide the others",
                ExitCode::bad_input);
  }
  const json* rows = &doc;
  if (doc.is_object()) {
    for (const char* k : {"rows", "data", "train"}) {
      if (auto it = doc.find(k); it != doc.end() && it->is_array()) {
        rows = &*it;
        break;
      }
    }
  }
  if (!rows->is_array())
    throw Error(source.manifest.string() + ": a JSON manifest must be an array of row objects (or {\"rows\": [...]}), got a " +
                    doc.type_name(),
                ExitCode::bad_input);
  for (std::size_t i = 0; i < rows->size(); ++i) add_row((*rows)[i], static_cast<std::int64_t>(i + 1));
  return m;
}

}  // namespace yeto::data
