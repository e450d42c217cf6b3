// Built only by the test daemon_layers_refuse_an_include_against_the_grain, in ddo_policy's
// include context: policy (layer 2) may not include the store (layer 3), so this must not compile.
#include "daemon/store/component_store.h"

int DdoLayerProbeAgainstGrain() { return sizeof(ddo::ComponentStore) > 0 ? 0 : 1; }
