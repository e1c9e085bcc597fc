// The run record (events.jsonl, summary.json, metrics.jsonl) in words, for the report a person
// reads: each event as one sentence ("Switched to parameter servers at step 1,930 (epoch 14.9),
// handover 17 ms"), and the loose readers that get a figure out of a record line whatever a
// version of Strata wrote there (a missing or mistyped field reads as NaN or "", never throws).
// An event this version does not know is named with its plain fields, never dumped as JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata {
namespace record_text {

// `j[key]` if `j` is an object holding a value of that type; NaN, "", false or null otherwise.
double Number(const nlohmann::json& j, const char* key);
std::string Text(const nlohmann::json& j, const char* key);
bool Flag(const nlohmann::json& j, const char* key);
nlohmann::json Member(const nlohmann::json& j, const char* key);
// A pid or rank as written, without thousands separators; "--" when absent.
std::string Id(const nlohmann::json& j, const char* key);

std::string Capitalized(std::string s);
// "a", "a and b", "a, b and c".
std::string JoinAnd(const std::vector<std::string>& items);
// "1 process", "1,024 processes".
std::string Plural(int64_t n, const std::string& one, const std::string& many);
// An epoch the record gives as a fraction (the switch's), with one decimal: "14.9".
std::string EpochText(double epoch);

}  // namespace record_text

// One event of events.jsonl in words; "" for an event the timeline leaves out.
std::string DescribeEvent(const nlohmann::json& e);

}  // namespace strata
