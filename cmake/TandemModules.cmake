# One static library per module folder of src/tandem, with its declared dependencies.
#
# Layering is a build fact: a module is compiled with an include path that holds only its own
# folder and the folders of the modules it depends on (symbolic links under
# <build>/layering/<module>/tandem/), so including a header of a module it does not declare fails to
# compile, and calling one fails to link. Tests, benchmarks and the command see every module
# through the `tandem_lib` interface target.

set(TANDEM_LAYERING_DIR ${CMAKE_BINARY_DIR}/layering)

# tandem_module(NAME [DEPS module...] [PUBLIC_LIBS lib...] [PRIVATE_LIBS lib...] [SOURCES file...])
# Sources default to src/tandem/NAME/*.cc and src/tandem/NAME/cpu/*.cc.
function(tandem_module name)
  cmake_parse_arguments(M "" "" "DEPS;PUBLIC_LIBS;PRIVATE_LIBS;SOURCES;EXCLUDE" ${ARGN})
  if(NOT M_SOURCES)
    file(GLOB M_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/tandem/${name}/*.cc
         ${CMAKE_SOURCE_DIR}/src/tandem/${name}/cpu/*.cc)
  endif()
  foreach(pattern ${M_EXCLUDE})
    list(FILTER M_SOURCES EXCLUDE REGEX "${pattern}")
  endforeach()
  # The transitive closure of the declared dependencies.
  set(closure "")
  foreach(dep ${M_DEPS})
    if(NOT TARGET tandem_${dep})
      message(FATAL_ERROR "module ${name} depends on ${dep}, which is not declared before it")
    endif()
    get_property(dep_closure GLOBAL PROPERTY TANDEM_CLOSURE_${dep})
    list(APPEND closure ${dep} ${dep_closure})
  endforeach()
  list(REMOVE_DUPLICATES closure)
  set_property(GLOBAL PROPERTY TANDEM_CLOSURE_${name} ${closure})
  set_property(GLOBAL APPEND PROPERTY TANDEM_MODULES ${name})

  set(farm ${TANDEM_LAYERING_DIR}/${name})
  file(REMOVE_RECURSE ${farm})
  file(MAKE_DIRECTORY ${farm}/tandem)
  foreach(m ${name} ${closure})
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/src/tandem/${m} ${farm}/tandem/${m} SYMBOLIC)
  endforeach()

  add_library(tandem_${name} STATIC ${M_SOURCES})
  target_include_directories(tandem_${name} PRIVATE ${farm})
  set(dep_targets "")
  foreach(dep ${M_DEPS})
    list(APPEND dep_targets tandem_${dep})
  endforeach()
  target_link_libraries(tandem_${name} PUBLIC ${dep_targets} ${M_PUBLIC_LIBS}
                        PRIVATE ${M_PRIVATE_LIBS})
endfunction()
