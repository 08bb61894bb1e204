// attnflow/nn_golden.h — golden cases of the nn kinds (docs/nn.md, "Golden
// format extension"): loading, running the float64 reference and comparing
// every listed stage.
//
// Invariants:
//  * A case is an attnflow-golden/1 safetensors file whose `kind` starts with
//    "nn_"; its metadata `config` is a JSON object and `stages` is the
//    comma-separated canonical stage list of that case (each new kind carries
//    its own stage list). Every other tensor is an input or a weight.
//  * Inputs are validated before anything runs; errors name the file, the
//    tensor or the config field (kCorrupt).
#pragma once

#include <string>
#include <string_view>

#include "attnflow/compare.h"
#include "attnflow/stages.h"
#include "attnflow/safetensors.h"

namespace attnflow::nn {

// The nn kinds: nn_sinusoidal nn_learned_pos nn_rope nn_t5_bias nn_block
// nn_decoder_layer nn_transformer nn_align nn_transfo_xl.
bool IsNnGoldenKind(std::string_view kind);
const std::vector<std::string>& NnGoldenKinds();

// Runs the reference on the case and compares each listed stage.
// atol/rtol >= 0 override the case's tolerances.
Result<CaseReport> VerifyNnCase(const SafetensorsFile& file, double atol = -1,
                                double rtol = -1);
Result<CaseReport> VerifyNnCaseFile(const std::string& path, double atol = -1,
                                    double rtol = -1);

// Runs the reference and returns every stage it produces (for tools that
// dump a port's expected values).
Status RunNnCase(const SafetensorsFile& file, StageRecorder* rec);

}  // namespace attnflow::nn
