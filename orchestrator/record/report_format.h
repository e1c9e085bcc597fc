// Numbers and words as a person reads them in the run report and the sweep report: durations
// with their unit ("17 ms", "15.3 s", "2 min 05 s"), rates and counts with thousands separators,
// accuracies in percent, the phases by name ("parameter servers", not "ps"), and axis ticks at
// round numbers (steps of 1, 2 or 5 times a power of ten). Pure functions, so that every rounding
// and every tick choice is unit-tested (tests/unit/orchestrator/report_test.cc).
//
// The charts are laid out on the server side, before a browser measures anything, so labels
// must not collide by construction: EstimateTextWidth is a deliberately generous guess of a
// label's width in the report's sans-serif font, which the layout uses to wrap legends and space
// ticks. The browser test (tests/e2e/report_browser_test.cc) measures the real boxes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// `v` rounded to `digits` significant digits, written without an exponent ("0.361", "15.3",
// "74,900"); "--" for NaN and infinities. Thousands are separated by commas.
std::string FormatSignificant(double v, int digits = 3);

// `v` with exactly `decimals` decimals and thousands separators ("74,850", "0.347"); "--" if not
// finite.
std::string FormatFixed(double v, int decimals);

// An integer count with thousands separators ("30,000").
std::string FormatCount(int64_t n);

// A duration: "850 us", "17 ms", "1.24 s", "15.3 s", "2 min 05 s", "1 h 02 min"; "--" if not
// finite or negative.
std::string FormatSeconds(double seconds);

// A fraction in [0, 1] as a percentage with `decimals` decimals ("88.16 %"); "--" if not finite.
std::string FormatPercent(double fraction, int decimals = 2);

// Samples per second, rounded to 3 significant digits ("74,900 samples/s").
std::string FormatRate(double samples_per_s);

// The name of a training phase as the record spells it, for a reader: "allreduce" ->
// "all-reduce", "ps" -> "parameter servers", "starting" -> "start-up"; unknown names unchanged.
std::string PhaseLabel(const std::string& phase);

// A record key for a reader: underscores become spaces and the common abbreviations are spelt
// out ("final_val_acc" -> "final validation accuracy", "wall_s" -> "wall time (s)").
std::string HumanKey(const std::string& key);

// Axis ticks: the values k * step, for the smallest step of 1, 2 or 5 times a power of ten whose
// ticks, from the last multiple at or below `lo` to the first at or above `hi`, number at most
// `max_ticks` (taken as at least 3, which always suffice). The axis then runs from tick to tick. lo
// > hi is swapped; a range of zero width is widened around its value; non-finite bounds give the
// ticks of [0, 1].
struct AxisTicks {
  double step = 1;
  std::vector<double> values;  // ascending; front() <= lo, back() >= hi
  double lo() const { return values.front(); }
  double hi() const { return values.back(); }
};
AxisTicks NiceTicks(double lo, double hi, int max_ticks);

// The label of tick `v` on an axis of ticks `step` apart: as many decimals as the step needs,
// and thousands as "k" when the step is a multiple of 1000 ("20k"). Never "-0".
std::string TickLabel(double v, double step);

// A generous estimate of the width in pixels of `text` at `font_size` px in the report's
// sans-serif font (wide glyphs such as DejaVu Sans', upper case and digits counted wider).
double EstimateTextWidth(const std::string& text, double font_size);

// Text made safe inside HTML and SVG elements and attribute values (both quote kinds).
std::string HtmlEscape(const std::string& s);

// `text` shortened with "..." at the end to fit `max_width` px at `font_size` (estimated).
std::string FitText(const std::string& text, double font_size, double max_width);

}  // namespace strata
