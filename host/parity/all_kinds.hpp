// Every parity kind this build can check, registered once. The check-parity command calls
// register_all_parity_kinds(); an area that adds kinds adds its `register_<area>_parity_kinds()`
// call to all_kinds.cpp and links its library into yeto_parity_command (host/parity/CMakeLists.txt).
#pragma once

namespace yeto::parity {

void register_all_parity_kinds();

}  // namespace yeto::parity
