// JSON as Python's json module writes it: like JSON, plus the bare literals Infinity,
// -Infinity and NaN for non-finite floats (Diffusers configs and fixture case.json files contain
// e.g. "lambda_min_clipped": -Infinity). Torch-free.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace yeto {

// Parses `text`, turning those literals (outside strings) into double infinities / NaN.
// Throws yeto::Error (ExitCode::bad_input) naming `label` on invalid input.
nlohmann::json parse_python_json(const std::string& text, const std::string& label);

}  // namespace yeto
