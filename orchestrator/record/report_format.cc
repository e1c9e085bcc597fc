#include "orchestrator/record/report_format.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_replace.h>

namespace strata {
namespace {

// Inserts commas into the integer part of a plain decimal number ("-74850.5" -> "-74,850.5").
std::string GroupThousands(const std::string& plain) {
  const size_t sign = (!plain.empty() && plain[0] == '-') ? 1 : 0;
  const size_t dot = plain.find('.');
  const size_t int_end = dot == std::string::npos ? plain.size() : dot;
  std::string out = plain.substr(0, sign);
  const std::string digits = plain.substr(sign, int_end - sign);
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out + plain.substr(int_end);
}

// "-0" and "-0.00" read as a sign where there is none.
std::string DropNegativeZero(std::string s) {
  if (!s.empty() && s[0] == '-' && s.find_first_not_of("-0.,") == std::string::npos) s.erase(0, 1);
  return s;
}

}  // namespace

std::string FormatFixed(double v, int decimals) {
  if (!std::isfinite(v)) return "--";
  return DropNegativeZero(GroupThousands(absl::StrFormat("%.*f", std::max(0, decimals), v)));
}

std::string FormatSignificant(double v, int digits) {
  if (!std::isfinite(v)) return "--";
  if (v == 0) return "0";
  digits = std::max(1, digits);
  // Decimals so that `digits` significant digits show; integers above that are rounded
  // (74,850 -> 74,900 at 3 digits).
  const int magnitude = static_cast<int>(std::floor(std::log10(std::fabs(v))));
  const int decimals = digits - 1 - magnitude;
  if (decimals >= 0) {
    // Rounding may carry into the next magnitude (9.996 -> 10.00): one decimal fewer then.
    std::string s = absl::StrFormat("%.*f", decimals, v);
    const double rounded = std::strtod(s.c_str(), nullptr);
    if (rounded != 0 && static_cast<int>(std::floor(std::log10(std::fabs(rounded)))) > magnitude &&
        decimals > 0) {
      s = absl::StrFormat("%.*f", decimals - 1, v);
    }
    return DropNegativeZero(GroupThousands(s));
  }
  const double unit = std::pow(10.0, -decimals);
  return DropNegativeZero(GroupThousands(absl::StrFormat("%.0f", std::round(v / unit) * unit)));
}

std::string FormatCount(int64_t n) { return GroupThousands(absl::StrCat(n)); }

std::string FormatSeconds(double s) {
  if (!std::isfinite(s) || s < 0) return "--";
  if (s < 1e-3) return absl::StrCat(FormatSignificant(s * 1e6, 3), " us");
  if (s < 1) {
    // Whole milliseconds from 10 ms on: a handover of 13.2 ms reads "13 ms".
    const double ms = s * 1e3;
    return absl::StrCat(ms < 10 ? FormatSignificant(ms, 2) : FormatFixed(ms, 0), " ms");
  }
  if (s < 10) return absl::StrCat(FormatFixed(s, 2), " s");
  if (s < 59.95) return absl::StrCat(FormatFixed(s, 1), " s");
  const int64_t total = static_cast<int64_t>(std::llround(s));
  if (total < 3600) return absl::StrFormat("%d min %02d s", total / 60, total % 60);
  const int64_t minutes = (total + 30) / 60;
  return absl::StrFormat("%d h %02d min", minutes / 60, minutes % 60);
}

std::string FormatPercent(double fraction, int decimals) {
  if (!std::isfinite(fraction)) return "--";
  return absl::StrCat(FormatFixed(fraction * 100, decimals), " %");
}

std::string FormatRate(double samples_per_s) {
  if (!std::isfinite(samples_per_s)) return "--";
  return absl::StrCat(FormatSignificant(samples_per_s, 3), " samples/s");
}

std::string PhaseLabel(const std::string& phase) {
  if (phase == "allreduce") return "all-reduce";
  if (phase == "ps") return "parameter servers";
  if (phase == "starting") return "start-up";
  return phase;
}

std::string HumanKey(const std::string& key) {
  // Whole keys first: their units are worth saying.
  static const std::pair<const char*, const char*> kWhole[] = {
      {"wall_s", "wall time (s)"},
      {"training_s", "training time (s)"},
      {"time_to_target_s", "time to target (s)"},
      {"final_val_acc", "final validation accuracy"},
      {"final_val_loss", "final validation loss"},
      {"switch_epoch", "switch epoch"},
      {"samples_per_s_allreduce", "samples/s in all-reduce"},
      {"samples_per_s_ps", "samples/s with parameter servers"},
      {"samples_per_s", "samples/s"},
      {"events_per_s", "events/s"},
      {"prequential_accuracy", "accuracy before training"},
      {"events_to_recover", "events to recover from the drift"},
  };
  for (const auto& [k, label] : kWhole) {
    if (key == k) return label;
  }
  std::string out = absl::StrReplaceAll(key, {{"_", " "}});
  out = absl::StrCat(" ", out, " ");
  out = absl::StrReplaceAll(out, {{" val ", " validation "},
                                  {" acc ", " accuracy "},
                                  {" ps ", " parameter servers "},
                                  {" allreduce ", " all-reduce "}});
  return out.substr(1, out.size() - 2);
}

AxisTicks NiceTicks(double lo, double hi, int max_ticks) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (lo > hi) std::swap(lo, hi);
  if (hi - lo < 1e-12 * std::max(1.0, std::fabs(hi))) {
    const double pad = lo == 0 ? 0.5 : std::fabs(lo) * 0.05;
    lo -= pad, hi += pad;
  }
  // Two ticks cannot always cover a range (one that straddles 0 needs -step, 0 and step); three
  // always can.
  max_ticks = std::max(3, max_ticks);
  const double raw = (hi - lo) / (max_ticks - 1);
  double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  AxisTicks ticks;
  for (int guard = 0; guard < 64; ++guard) {
    for (double m : {1.0, 2.0, 5.0}) {
      const double step = m * magnitude;
      // A small tolerance, so that 0.3 / 0.1 counts as 3 and not as 3.0000000000000004.
      const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
      if (last - first + 1 <= max_ticks) {
        ticks.step = step;
        for (double k = first; k <= last; k += 1) ticks.values.push_back(k * step);
        return ticks;
      }
    }
    magnitude *= 10;
  }
  ticks.values = {lo, hi};  // unreachable for finite input
  ticks.step = hi - lo;
  return ticks;
}

std::string TickLabel(double v, double step) {
  if (!std::isfinite(v)) return "--";
  if (std::fabs(v) < step * 1e-9) return "0";
  if (step >= 1000 && std::fmod(step, 1000) == 0) {
    return absl::StrCat(FormatFixed(v / 1000, 0), "k");
  }
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  // Labels from a step of 0.5 or 0.25 need one decimal more than the step's magnitude.
  int extra = 0;
  const double scaled = step * std::pow(10.0, decimals);
  if (std::fabs(scaled - std::round(scaled)) > 1e-6) extra = 1;
  return FormatFixed(v, decimals + extra);
}

double EstimateTextWidth(const std::string& text, double font_size) {
  double em = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      // A multi-byte UTF-8 character counts once, as a wide glyph.
      if ((c & 0xC0) == 0xC0) em += 0.8;
      continue;
    }
    if (c == ' ') {
      em += 0.33;
    } else if (std::string_view("il.,:;'|!").find(static_cast<char>(c)) != std::string_view::npos) {
      em += 0.34;
    } else if (std::isupper(c) || c == 'm' || c == 'w' || c == '%') {
      em += 1.0;  // DejaVu Sans: W 0.99 em, m 0.97 em
    } else {
      em += 0.64;  // DejaVu Sans: digits 0.636 em, most lower case 0.6-0.63 em
    }
  }
  return em * font_size + 2;
}

std::string FitText(const std::string& text, double font_size, double max_width) {
  if (EstimateTextWidth(text, font_size) <= max_width) return text;
  std::string cut = text;
  while (!cut.empty() && EstimateTextWidth(cut + "...", font_size) > max_width) {
    cut.pop_back();
    // Never end inside a multi-byte character.
    while (!cut.empty() && (static_cast<unsigned char>(cut.back()) & 0xC0) == 0x80) cut.pop_back();
    if (!cut.empty() && (static_cast<unsigned char>(cut.back()) & 0xC0) == 0xC0) cut.pop_back();
  }
  return cut + "...";
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace strata
