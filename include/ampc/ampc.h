/*
 * ampc/ampc.h: umbrella header. Include this to get the whole public API.
 * Layers (DESIGN.md section 1): numeric formats (dtype.h), GEMM (gemm.h),
 * layers (nn.h), precision (amp.h), parameters (params.h), optimizers
 * (optim.h), checkpoints (io.h), the engine (engine.h), models (model.h),
 * datasets (data.h), the memory account (report.h).
 */
#ifndef AMPC_AMPC_H
#define AMPC_AMPC_H

#include "ampc/amp.h"
#include "ampc/backend.h"
#include "ampc/data.h"
#include "ampc/diag.h"
#include "ampc/dist.h"
#include "ampc/dtype.h"
#include "ampc/engine.h"
#include "ampc/gemm.h"
#include "ampc/io.h"
#include "ampc/model.h"
#include "ampc/nn.h"
#include "ampc/optim.h"
#include "ampc/params.h"
#include "ampc/quant.h"
#include "ampc/report.h"
#include "ampc/shards.h"
#include "ampc/status.h"
#include "ampc/tally.h"
#include "ampc/train.h"
#include "ampc/version.h"

#endif
