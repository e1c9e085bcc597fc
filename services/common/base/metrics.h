// JSON-lines writer: one self-contained JSON object per line, flushed at once, so that a reader
// (`strata status`, a plot) can follow the file while a run is still going.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>

#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

namespace strata {

class JsonLinesWriter {
 public:
  // Opens for append; creates the file if needed.
  static absl::StatusOr<std::unique_ptr<JsonLinesWriter>> Open(const std::string& path);
  ~JsonLinesWriter();
  JsonLinesWriter(const JsonLinesWriter&) = delete;
  JsonLinesWriter& operator=(const JsonLinesWriter&) = delete;

  absl::Status Write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  JsonLinesWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  std::FILE* file_;
  std::mutex mu_;
};

// Reads every complete line; a torn last line (a writer mid-write) is skipped, other bad lines are
// an error naming the line number.
absl::StatusOr<std::vector<nlohmann::json>> ReadJsonLines(const std::string& path);

// A whole JSON file (status.json, summary.json); null when it is missing, unreadable or not JSON
// (a reader of a run's files takes what is there).
nlohmann::json ReadJsonFile(const std::string& path);

}  // namespace strata
