// Every parity kind this build can check, registered once. The check-parity command calls
// register_all_parity_kinds(); an area that adds kinds adds its `register_<area>_parity_kinds()`
// call to parity_kinds.cpp and links its library into yeto_app_torch (host/app/CMakeLists.txt).
#pragma once

namespace yeto::app {

void register_all_parity_kinds();

}  // namespace yeto::app
