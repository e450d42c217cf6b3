# The daemon's folders as layers the build enforces (docs/architecture.md §2, "Layers").
#
#   ddo_daemon_layer(<folder> LAYER <n>
#                    SOURCES <.cc files of the folder>
#                    [PUBLIC_DEPS <folders its headers include>]
#                    [PRIVATE_DEPS <folders only its .cc files include>]
#                    [PUBLIC_LIBS ...] [PRIVATE_LIBS ...])
#
# makes the static library ddo_<folder>. Two rules hold it to the layer order:
#   - a folder may depend only on folders of a lower layer, declared before it: anything else
#     stops the configure step with the reason;
#   - a folder's headers are reachable only through its library: its include root,
#     <build>/daemon-layers/<folder>, holds one link, daemon/<folder>, to the sources. The project
#     root is on no daemon library's include path, so `#include "daemon/store/x.h"` compiles only
#     in a library that depends on ddo_store. An include against the grain fails to compile
#     (tests/layers proves it with a deliberate one); adding the dependency fails to configure.
# Tests are not layered: ddo_unit_tests links every layer through ddo_core.

set(DDO_LAYER_INCLUDE_DIR ${CMAKE_BINARY_DIR}/daemon-layers)

function(ddo_daemon_layer folder)
  cmake_parse_arguments(PARSE_ARGV 1 arg ""
    "LAYER" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS;PUBLIC_LIBS;PRIVATE_LIBS")
  if(NOT DEFINED arg_LAYER OR NOT arg_LAYER MATCHES "^[0-9]+$")
    message(FATAL_ERROR "daemon/${folder}: ddo_daemon_layer needs LAYER <number>")
  endif()
  foreach(dep IN LISTS arg_PUBLIC_DEPS arg_PRIVATE_DEPS)
    get_property(dep_layer GLOBAL PROPERTY DDO_DAEMON_LAYER_${dep})
    if(dep_layer STREQUAL "")
      message(FATAL_ERROR "daemon/${folder} depends on daemon/${dep}, which is not a layer "
        "declared before it (ddo_daemon_layer(${dep} ...) comes first)")
    endif()
    if(NOT dep_layer LESS arg_LAYER)
      message(FATAL_ERROR "daemon/${folder} (layer ${arg_LAYER}) may not depend on daemon/${dep} "
        "(layer ${dep_layer}): a folder includes only folders of a lower layer "
        "(docs/architecture.md, Layers)")
    endif()
  endforeach()
  set_property(GLOBAL PROPERTY DDO_DAEMON_LAYER_${folder} ${arg_LAYER})

  set(include_root ${DDO_LAYER_INCLUDE_DIR}/${folder})
  file(MAKE_DIRECTORY ${include_root}/daemon)
  file(CREATE_LINK ${CMAKE_CURRENT_SOURCE_DIR}/${folder} ${include_root}/daemon/${folder}
    SYMBOLIC)

  list(TRANSFORM arg_SOURCES PREPEND ${folder}/)
  if(DDO_WINDOWS_CORE)
    # Files whose Windows halves are not written yet (daemon/CMakeLists.txt).
    list(REMOVE_ITEM arg_SOURCES ${DDO_NOT_YET_ON_WINDOWS})
  endif()
  list(TRANSFORM arg_PUBLIC_DEPS PREPEND ddo_)
  list(TRANSFORM arg_PRIVATE_DEPS PREPEND ddo_)
  add_library(ddo_${folder} STATIC ${arg_SOURCES})
  target_include_directories(ddo_${folder} PUBLIC ${include_root})
  target_link_libraries(ddo_${folder}
    PUBLIC ${arg_PUBLIC_DEPS} ${arg_PUBLIC_LIBS}
    PRIVATE ${arg_PRIVATE_DEPS} ${arg_PRIVATE_LIBS} ddo_warnings)
endfunction()
