#include "orchestrator/record/report_chart.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

namespace strata {
namespace {

// The frame of a line chart, in px: the plot's left edge leaves room for y tick labels of about
// six characters, the right edge for half of the last x tick label.
constexpr double kLeft = 58, kRight = 24, kTitleBaseline = 18, kLegendTop = 28;
constexpr double kTickFont = 10, kLegendFont = 11, kTitleFont = 14;

bool Finite(std::pair<double, double> p) {
  return std::isfinite(p.first) && std::isfinite(p.second);
}

}  // namespace

const std::string& PaletteColor(size_t i) {
  static const std::string kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return kPalette[i % 10];
}

std::string ChartOpen(double width, double height, const std::string& css_class,
                      const std::string& title) {
  // Bold text is wider than the estimate's regular glyphs: measured as if 10% larger.
  return absl::StrFormat(
      "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
      "viewBox='0 0 %.0f %.0f' class='chart %s' font-family='sans-serif'>"
      "<text x='8' y='%.0f' font-size='%.0f' font-weight='bold' class='chart-title'>%s</text>",
      width, height, width, height, css_class, kTitleBaseline, kTitleFont,
      HtmlEscape(FitText(title, kTitleFont * 1.1, width - 16)));
}

LegendLayout Legend(const std::vector<LegendItem>& items, double x, double top, double right) {
  LegendLayout out;
  if (items.empty()) return out;
  constexpr double kRow = 16, kSwatch = 16, kSwatchGap = 6, kEntryGap = 14;
  double cx = x, row_top = top;
  for (const LegendItem& item : items) {
    const double font = item.bold ? kLegendFont * 1.1 : kLegendFont;
    const std::string label = FitText(item.label, font, right - x - kSwatch - kSwatchGap);
    const double w = kSwatch + kSwatchGap + EstimateTextWidth(label, font);
    if (cx > x && cx + w > right) cx = x, row_top += kRow;
    const double mid = row_top + 8;
    switch (item.swatch) {
      case LegendItem::Swatch::kLine:
        absl::StrAppendFormat(&out.svg,
                              "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' "
                              "stroke-width='3'/>",
                              cx, mid, cx + kSwatch, mid, item.color);
        break;
      case LegendItem::Swatch::kDashed:
        absl::StrAppendFormat(&out.svg,
                              "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' "
                              "stroke-width='2' stroke-dasharray='4,3'/>",
                              cx, mid, cx + kSwatch, mid, item.color);
        break;
      case LegendItem::Swatch::kDot:
        absl::StrAppendFormat(&out.svg, "<circle cx='%.1f' cy='%.1f' r='4' fill='%s'/>",
                              cx + kSwatch / 2, mid, item.color);
        break;
      case LegendItem::Swatch::kRing:
        absl::StrAppendFormat(&out.svg,
                              "<circle cx='%.1f' cy='%.1f' r='3' fill='none' stroke='%s'/>",
                              cx + kSwatch / 2, mid, item.color);
        break;
    }
    absl::StrAppendFormat(&out.svg,
                          "<text x='%.1f' y='%.1f' font-size='%.0f'%s class='legend'>%s</text>",
                          cx + kSwatch + kSwatchGap, row_top + 12, kLegendFont,
                          item.bold ? " font-weight='bold'" : "", HtmlEscape(label));
    cx += w + kEntryGap;
  }
  out.height = row_top + kRow - top;
  return out;
}

AxisTicks HorizontalAxisTicks(double lo, double hi, double length, double font_size) {
  // Fewer ticks until every label, at its estimated width plus a gap, fits between its
  // neighbours.
  for (int max_ticks = std::max(3, static_cast<int>(length / 40) + 1); max_ticks > 3; --max_ticks) {
    AxisTicks ticks = NiceTicks(lo, hi, max_ticks);
    double widest = 0;
    for (double v : ticks.values) {
      widest = std::max(widest, EstimateTextWidth(TickLabel(v, ticks.step), font_size));
    }
    const double spacing = length / std::max<size_t>(1, ticks.values.size() - 1);
    if (spacing >= widest + 12) return ticks;
  }
  return NiceTicks(lo, hi, 3);
}

AxisTicks VerticalAxisTicks(double lo, double hi, double length) {
  // A line of 10 px text is about 12 px high; 22 px apart leaves a clear gap.
  return NiceTicks(lo, hi, std::max(3, static_cast<int>(length / 22) + 1));
}

std::string LineChart(const LineChartOptions& o, const std::vector<ChartSeries>& series,
                      const std::vector<ChartMarker>& markers) {
  const double W = o.width, L = kLeft, R = kRight;
  std::vector<LegendItem> legend;
  for (const ChartSeries& s : series) {
    if (s.in_legend) legend.push_back({s.label, s.color, LegendItem::Swatch::kLine, false});
  }
  std::set<std::string> marker_labels;
  for (const ChartMarker& m : markers) {
    if (std::isfinite(m.x) && marker_labels.insert(m.label).second) {
      legend.push_back({m.label, m.color, LegendItem::Swatch::kDashed, false});
    }
  }
  legend.insert(legend.end(), o.extra_legend.begin(), o.extra_legend.end());
  const LegendLayout legend_layout = Legend(legend, L, kLegendTop, W - 8);
  const double T = legend_layout.height > 0 ? kLegendTop + legend_layout.height + 10 : 30;
  const double PB = T + o.plot_height;  // the plot's bottom edge
  const double H = PB + 44;

  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  size_t finite_points = 0;
  for (const ChartSeries& s : series) {
    for (const auto& p : s.points) {
      if (!Finite(p)) continue;
      ++finite_points;
      x0 = std::min(x0, p.first), x1 = std::max(x1, p.first);
      y0 = std::min(y0, p.second), y1 = std::max(y1, p.second);
    }
  }
  std::string svg = ChartOpen(W, H, o.css_class, o.title);
  if (finite_points == 0) {
    return absl::StrCat(svg, absl::StrFormat("<text x='%.0f' y='%.0f' font-size='13' fill='#666' "
                                             "class='empty'>%s</text></svg>",
                                             L, T + o.plot_height / 2, HtmlEscape(o.empty_text)));
  }
  svg += legend_layout.svg;
  for (const ChartMarker& m : markers) {
    if (std::isfinite(m.x)) x0 = std::min(x0, m.x), x1 = std::max(x1, m.x);
  }
  if (o.x_from_zero) x0 = std::min(x0, 0.0);
  if (o.y_from_zero) y0 = std::min(y0, 0.0);
  const AxisTicks xt = HorizontalAxisTicks(x0, x1, W - L - R, kTickFont);
  const AxisTicks yt = VerticalAxisTicks(y0, y1, o.plot_height);
  auto px = [&](double x) { return L + (x - xt.lo()) / (xt.hi() - xt.lo()) * (W - L - R); };
  auto py = [&](double y) { return T + (1 - (y - yt.lo()) / (yt.hi() - yt.lo())) * o.plot_height; };

  for (double v : yt.values) {
    absl::StrAppendFormat(&svg,
                          "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#eee'/>"
                          "<text x='%.1f' y='%.1f' font-size='%.0f' text-anchor='end' "
                          "class='tick y-tick'>%s</text>",
                          L, py(v), W - R, py(v), L - 6, py(v) + 3.5, kTickFont,
                          TickLabel(v, yt.step));
  }
  for (double v : xt.values) {
    absl::StrAppendFormat(&svg,
                          "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#f3f3f3'/>"
                          "<text x='%.1f' y='%.1f' font-size='%.0f' text-anchor='middle' "
                          "class='tick x-tick'>%s</text>",
                          px(v), T, px(v), PB, px(v), PB + 18, kTickFont, TickLabel(v, xt.step));
  }
  absl::StrAppendFormat(&svg,
                        "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' "
                        "stroke='#999'/>"
                        "<text x='%.1f' y='%.1f' font-size='11' text-anchor='middle' "
                        "class='axis-label'>%s</text>",
                        L, T, W - L - R, o.plot_height, (L + W - R) / 2, PB + 36,
                        HtmlEscape(o.x_label));
  for (const ChartMarker& m : markers) {
    if (!std::isfinite(m.x)) continue;
    absl::StrAppendFormat(&svg,
                          "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' "
                          "stroke-width='1.5' stroke-dasharray='5,4' class='marker %s'>"
                          "<title>%s</title></line>",
                          px(m.x), T, px(m.x), PB, m.color, m.css_class,
                          HtmlEscape(m.hover.empty() ? m.label : m.hover));
  }
  for (const ChartSeries& s : series) {
    std::string path, dots;
    size_t n = 0;
    for (const auto& p : s.points) {
      if (!Finite(p)) continue;
      ++n;
      absl::StrAppendFormat(&path, "%s%.1f,%.1f", path.empty() ? "M" : " L", px(p.first),
                            py(p.second));
      if (s.dots) {
        absl::StrAppendFormat(&dots,
                              "<circle cx='%.1f' cy='%.1f' r='2.5' fill='%s' class='point' "
                              "data-series='%s'/>",
                              px(p.first), py(p.second), s.color, HtmlEscape(s.label));
      }
    }
    if (n == 0) continue;
    absl::StrAppendFormat(&svg,
                          "<path d='%s' fill='none' stroke='%s' stroke-width='%.1f' "
                          "class='series%s' data-series='%s' data-points='%d'>%s</path>%s",
                          path, s.color, s.stroke_width,
                          s.extra_class.empty() ? "" : " " + s.extra_class, HtmlEscape(s.label), n,
                          s.hover.empty() ? "" : "<title>" + HtmlEscape(s.hover) + "</title>",
                          dots);
  }
  return svg + "</svg>";
}

}  // namespace strata
