// report.html: the run's curves as inline SVG (no scripts, no network), readable from a file.
#pragma once

#include <string>
#include <vector>

#include <absl/status/status.h>
#include <nlohmann/json.hpp>

namespace strata {

struct ReportInput {
  std::string title;
  std::vector<nlohmann::json> metrics;  // metrics.jsonl lines
  std::vector<nlohmann::json> events;   // events.jsonl lines
  nlohmann::json summary;               // null while the run is going
  std::string job_yaml;
};

std::string RenderReportHtml(const ReportInput& input);

// Text made safe inside HTML and SVG elements and attribute values (both quote kinds).
std::string HtmlEscape(const std::string& s);

// Reads the run directory's files and writes report.html (also for a run still going).
absl::Status WriteRunReport(const std::string& run_dir);

}  // namespace strata
