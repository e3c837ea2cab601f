// atomic_file.cpp — see atomic_file.h. Must never rename a temporary file that is not durable.
#include "trellara/log/atomic_file.h"

namespace trellara::log {

Status WriteFileAtomically(LogDevice& device, const std::string& dir, const std::string& name,
                           const std::string& tmp_name, const std::string& text) {
  return WriteFileAtomically(device, dir, name, tmp_name,
                             std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

Status WriteFileAtomically(LogDevice& device, const std::string& dir, const std::string& name,
                           const std::string& tmp_name, std::span<const uint8_t> text) {
  const std::string final_path = JoinPath(dir, name);
  const std::string tmp_path = JoinPath(dir, tmp_name);
  auto tmp = device.OpenFile(tmp_path, true);
  if (!tmp.ok()) return tmp.error();
  Status status = device.Truncate(*tmp, 0);
  if (status.ok()) status = device.WriteAt(*tmp, 0, text.data(), text.size());
  if (status.ok()) status = device.SyncData(*tmp);
  device.CloseFile(*tmp);
  if (!status.ok()) return status;
  TRELLARA_TRY(device.Rename(tmp_path, final_path));
  return device.SyncDirectory(dir);
}

}  // namespace trellara::log
