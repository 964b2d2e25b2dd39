/*
 * ampc/ampc.h: umbrella header. Include this to get the whole public API.
 * Layers (DESIGN.md section 1): numeric formats (dtype.h), and more to come.
 */
#ifndef AMPC_AMPC_H
#define AMPC_AMPC_H

#include "ampc/amp.h"
#include "ampc/dtype.h"
#include "ampc/gemm.h"
#include "ampc/nn.h"
#include "ampc/status.h"
#include "ampc/version.h"

#endif
