#pragma once
// The dtype switch of the CPU kernels that run in f32 or f64 only (convolution through BLAS,
// the optimizer updates), alongside core/dtype.h's GENESIS_DISPATCH_*: the body sees the
// element type as scalar_t; any other dtype throws, naming WHAT.
#include "libgenesis/core/dtype.h"

#define GENESIS_DISPATCH_F32_F64(DTYPE, WHAT, ...)     \
  switch (DTYPE) {                                     \
    GENESIS_DTYPE_CASE(f32, float, __VA_ARGS__)        \
    GENESIS_DTYPE_CASE(f64, double, __VA_ARGS__)       \
    default:                                           \
      ::genesis::throw_unsupported_dtype(WHAT, DTYPE); \
  }
