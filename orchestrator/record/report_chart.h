// The SVG pieces the run report and the sweep report draw with: a line chart (series against a
// numeric x, vertical markers such as the switch), a legend laid out in rows, and the frame of a
// numeric axis with ticks at round numbers.
//
// Labels never overlap by construction, because nothing measures them before a browser does:
// the title has a line of its own; the legend has rows of its own between the title and the plot
// (wrapped by the estimated width of each entry, report_format.h); markers are lines only, named
// in the legend and in a hover title, never by text inside the plot; tick labels are spaced by
// their estimated widths. The browser test measures the real boxes of every text element.
//
// What a reader (or a test) finds in the DOM: every chart is an <svg class='chart KIND'>; every
// series a <path class='series' data-series=LABEL data-points=N> with N <circle class='point'>
// of the same data-series (when it has dots); every marker a <line class='marker CLASS'>.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "orchestrator/record/report_format.h"

namespace strata {

// The tab10 palette, repeating after ten.
const std::string& PaletteColor(size_t i);

struct ChartSeries {
  std::string label;  // legend text, and the data-series attribute
  std::string color;
  std::vector<std::pair<double, double>> points;  // (x, y); non-finite points are skipped
  bool dots = true;
  double stroke_width = 2;
  bool in_legend = true;
  std::string extra_class;  // a class the path carries besides 'series' ("run-curve")
  std::string hover;        // the path's <title>
};

// A vertical line across a chart at `x` (NaN: not drawn): the switch, a `strata resume`.
struct ChartMarker {
  double x = 0;
  std::string label;      // its legend entry; markers of one label share it
  std::string css_class;  // "switch-marker", "resume-marker", ...
  std::string color;
  std::string hover;  // the line's <title>
};

struct LegendItem {
  enum class Swatch { kLine, kDashed, kDot, kRing };
  std::string label;
  std::string color;
  Swatch swatch = Swatch::kLine;
  bool bold = false;
};

struct LineChartOptions {
  std::string title;
  std::string css_class;  // the chart's kind, e.g. "loss-epoch"
  std::string x_label;
  double width = 460;
  double plot_height = 190;
  bool x_from_zero = false;
  bool y_from_zero = false;
  std::string empty_text = "no data yet";
  // Entries after those of the series and markers (a sweep names its cells, not its runs).
  std::vector<LegendItem> extra_legend;
};

std::string LineChart(const LineChartOptions& options, const std::vector<ChartSeries>& series,
                      const std::vector<ChartMarker>& markers);

// Legend entries in rows from (x, top), wrapped before `right`; font 11 px, rows 16 px apart.
struct LegendLayout {
  std::string svg;
  double height = 0;  // 0 without entries
};
LegendLayout Legend(const std::vector<LegendItem>& items, double x, double top, double right);

// A numeric axis of `length` px: how many ticks fit when each label needs its estimated width
// (horizontal axis) or a line of text (vertical axis) plus a gap, and the ticks chosen with that.
AxisTicks HorizontalAxisTicks(double lo, double hi, double length, double font_size);
AxisTicks VerticalAxisTicks(double lo, double hi, double length);

// "<svg ... class='chart KIND'>" with its title on the first line; the caller closes it.
std::string ChartOpen(double width, double height, const std::string& css_class,
                      const std::string& title);

}  // namespace strata
