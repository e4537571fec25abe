# The library's layers, checked: every #include of a libgenesis/ or kernels/ header must point
# at the file's own layer or one below it (docs/architecture.md, "Layers").
#   cmake -DROOT=<source dir> -P tests/layering/check_layers.cmake
#   cmake -DROOT=<source dir> -DSELF_TEST=ON -P ...   plants an upward include (core -> train)
#                                                       and a sibling one (cuda -> cpu kernels)
#                                                       and succeeds only when both are reported
# Exits non-zero listing each upward include as "file: includes header (layer A above layer B)".

cmake_minimum_required(VERSION 3.20)

# Rank of each layer, lowest first; layers of one rank may include each other.
set(rank_base 0)            # dtype, half types and errors (today's files in core/, listed below)
set(rank_kernels_common 1)  # kernels/common: formulas, op codes and argument structs of both devices
set(rank_kernels_cpu 2)     # kernels/cpu and kernels/cuda: siblings, neither includes the other
set(rank_kernels_cuda 2)
set(rank_core 3)            # libgenesis/core: tensor, storage, the allocator registry, threads, generator
set(rank_cuda 4)            # libgenesis/cuda: the CUDA runtime (streams, caching allocators it registers with core)
set(rank_autograd 5)        # autograd and ops are one layer: ops record their backward
set(rank_ops 5)
set(rank_amp 6)
set(rank_nn 6)
set(rank_optim 6)
set(rank_models 7)
set(rank_data 7)
set(rank_io 7)
set(rank_recipe 8)
set(rank_convert 9)
set(rank_dist 9)
set(rank_train 9)
set(rank_top 10)            # libgenesis/genesis.h, the umbrella header
set(siblings kernels_cpu kernels_cuda)
# Headers of the base layer that still live in core/.
set(base_headers libgenesis/core/dtype.h libgenesis/core/error.h libgenesis/core/half.h)

if(NOT ROOT)
  message(FATAL_ERROR "check_layers: pass -DROOT=<source dir>")
endif()

# The layer of a repository-relative path.
function(layer_of path out)
  if(path IN_LIST base_headers)
    set(${out} base PARENT_SCOPE)
  elseif(path MATCHES "^kernels/(common|cpu|cuda)/")
    set(${out} kernels_${CMAKE_MATCH_1} PARENT_SCOPE)
  elseif(path MATCHES "^libgenesis/([a-z_]+)/")
    set(${out} ${CMAKE_MATCH_1} PARENT_SCOPE)
  elseif(path MATCHES "^libgenesis/[^/]+$")
    set(${out} top PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

file(GLOB_RECURSE sources RELATIVE "${ROOT}" "${ROOT}/libgenesis/*" "${ROOT}/kernels/*")
list(FILTER sources INCLUDE REGEX "\\.(h|hpp|cpp|cu|cuh)$")
set(edges "")  # "file>header" for every project include
foreach(source IN LISTS sources)
  file(STRINGS "${ROOT}/${source}" lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"(libgenesis|kernels)/")
  foreach(line IN LISTS lines)
    if(line MATCHES "\"([^\"]+)\"")
      list(APPEND edges "${source}>${CMAKE_MATCH_1}")
    endif()
  endforeach()
endforeach()
if(SELF_TEST)
  list(APPEND edges "libgenesis/core/planted_by_the_self_test.cpp>libgenesis/train/trainer.h"
       "kernels/cuda/planted_by_the_self_test.cu>kernels/cpu/conv.h")
endif()

set(problems "")
set(unknown "")
foreach(edge IN LISTS edges)
  string(REPLACE ">" ";" pair "${edge}")
  list(GET pair 0 source)
  list(GET pair 1 header)
  layer_of("${source}" from)
  layer_of("${header}" to)
  if(NOT DEFINED rank_${from} OR NOT DEFINED rank_${to})
    list(APPEND unknown "${source}: includes ${header} (a layer this check does not know: add it to the table)")
    continue()
  endif()
  if(rank_${to} GREATER rank_${from})
    list(APPEND problems "${source}: includes ${header} (layer ${to} is above ${from})")
  elseif(NOT from STREQUAL to AND from IN_LIST siblings AND to IN_LIST siblings)
    list(APPEND problems "${source}: includes ${header} (${from} and ${to} share only kernels/common)")
  endif()
endforeach()
list(APPEND problems ${unknown})

if(SELF_TEST)
  list(LENGTH problems count)
  if(count EQUAL 2 AND problems MATCHES "core/planted_by_the_self_test" AND problems MATCHES "cuda/planted_by_the_self_test")
    message(STATUS "check_layers self-test: the planted core -> train and cuda -> cpu includes were reported")
    return()
  endif()
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "check_layers self-test: expected exactly the two planted includes, got:\n  ${text}")
endif()
if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "upward includes (docs/architecture.md, Layers):\n  ${text}")
endif()
list(LENGTH edges count)
message(STATUS "check_layers: ${count} includes, none upward")
