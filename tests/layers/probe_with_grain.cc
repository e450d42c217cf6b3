// Built only by the test daemon_layers_build_an_include_with_the_grain, in ddo_policy's include
// context: policy (layer 2) depends on layout (layer 1), so this compiles.
#include "daemon/layout/tensor_table.h"
#include "daemon/policy/session_planner.h"

int DdoLayerProbeWithGrain() { return ddo::TotalTensorBytes({}) == 0 ? 0 : 1; }
