#include "services/common/base/metrics.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include <absl/strings/str_cat.h>

#include "services/common/base/files.h"

namespace strata {

absl::StatusOr<std::unique_ptr<JsonLinesWriter>> JsonLinesWriter::Open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr) {
    return absl::InternalError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<JsonLinesWriter>(new JsonLinesWriter(path, file));
}

JsonLinesWriter::~JsonLinesWriter() { std::fclose(file_); }

absl::Status JsonLinesWriter::Write(const nlohmann::json& record) {
  std::string line = record.dump();
  line.push_back('\n');
  std::lock_guard<std::mutex> lock(mu_);
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return absl::InternalError(absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<nlohmann::json>> ReadJsonLines(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::vector<nlohmann::json> records;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    auto parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) {
      if (in.peek() == std::char_traits<char>::eof()) break;  // torn last line
      return absl::DataLossError(absl::StrCat(path, ":", number, ": not valid JSON"));
    }
    records.push_back(std::move(parsed));
  }
  return records;
}

nlohmann::json ReadJsonFile(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return nullptr;
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? nlohmann::json(nullptr) : j;
}

}  // namespace strata
