// load.cc — LoadModel: picks the loader from the path (directory with
// config.json -> BERT encoder, *.gguf -> Llama decoder).
#include <sys/stat.h>

#include "attnflow/model.h"
#include "model/loaders.h"

namespace attnflow {

Result<std::unique_ptr<Model>> LoadModel(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return IoError("load_model: " + path + ": no such file or directory");
  }
  if (S_ISDIR(st.st_mode)) return LoadBertModel(path);
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0) {
    return LoadLlamaGguf(path);
  }
  return InvalidArgument("load_model: " + path +
                         ": expected a model directory (config.json) or a .gguf file");
}

}  // namespace attnflow
