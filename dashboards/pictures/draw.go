package main

import (
	"encoding/json"
	"fmt"
	goimage "image"
	"image/color"
	godraw "image/draw"
	"image/png"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/replaywatch/replaywatch/dashboards/internal/dataset"
	"github.com/replaywatch/replaywatch/test/chdbtest"
)

// dpi of the PNGs; sizes below are in pixels, through px.
const dpi = 96

func px(n float64) vg.Length { return vg.Length(n * 72 / dpi) }

var (
	sans     = font.Font{Typeface: "Liberation", Variant: "Sans"}
	sansBold = font.Font{Typeface: "Liberation", Variant: "Sans", Weight: xfont.WeightBold}
	mono     = font.Font{Typeface: "Liberation", Variant: "Mono"}
	monoBold = font.Font{Typeface: "Liberation", Variant: "Mono", Weight: xfont.WeightBold}

	ink   = color.RGBA{0x20, 0x22, 0x26, 0xff}
	muted = color.RGBA{0x6e, 0x72, 0x78, 0xff}
	rule  = color.RGBA{0xdd, 0xdf, 0xe3, 0xff}
	band  = color.RGBA{0xf4, 0xf5, 0xf7, 0xff}
)

func init() { plot.DefaultFont = sans }

// Grafana's classic palette, and the colours it would be given by name.
var (
	palette = []color.RGBA{
		{0x73, 0xbf, 0x69, 0xff}, {0xf2, 0xcc, 0x0c, 0xff}, {0x8a, 0xb8, 0xff, 0xff}, {0xff, 0x78, 0x0a, 0xff},
		{0xf2, 0x49, 0x5c, 0xff}, {0x57, 0x94, 0xf2, 0xff}, {0xb8, 0x77, 0xd9, 0xff}, {0x70, 0x5d, 0xa0, 0xff},
		{0x37, 0x87, 0x2d, 0xff}, {0xfa, 0xde, 0x2a, 0xff}, {0x44, 0x7e, 0xbc, 0xff}, {0xc1, 0x5c, 0x17, 0xff},
	}
	named = map[string]color.RGBA{
		"green": palette[0], "red": palette[4], "orange": palette[3], "yellow": palette[1], "blue": palette[5],
		"critical": palette[4], "high": palette[3], "medium": palette[1], "low": palette[5], "info": palette[2],
		"resumed": palette[0], "violated": palette[4], "rejected_404": palette[3], "rejected_4xx": palette[1],
		"unverifiable": {0x9f, 0xa7, 0xb3, 0xff},
	}
)

// colorFor gives a series a colour: by its name when Grafana users would
// expect one (severities, outcomes), else the palette in order.
func colorFor(name string, i int) color.RGBA {
	if c, ok := named[name]; ok {
		return c
	}
	return palette[i%len(palette)]
}

// image is a canvas of w x h pixels with a white background.
type image struct {
	img *vgimg.Canvas
	c   draw.Canvas
}

func newImage(w, h float64) *image {
	img := vgimg.NewWith(vgimg.UseWH(px(w), px(h)), vgimg.UseDPI(dpi), vgimg.UseBackgroundColor(color.White))
	return &image{img: img, c: draw.New(img)}
}

// save writes the image as a paletted PNG: text and flat colours need few
// colours, and a palette keeps the files a few tens of KB.
func (m *image) save(file string) error {
	src := m.img.Image()
	dst := goimage.NewPaletted(src.Bounds(), pngPalette)
	godraw.Draw(dst, dst.Bounds(), src, src.Bounds().Min, godraw.Src)
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(f, dst); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// pngPalette: 24 greys, and each colour used with two tints towards white
// for the edges of anti-aliased shapes.
var pngPalette = func() color.Palette {
	var p color.Palette
	for i := 0; i < 24; i++ {
		g := uint8(i * 255 / 23)
		p = append(p, color.RGBA{g, g, g, 0xff})
	}
	add := func(c color.RGBA) {
		for _, t := range []int{0, 1, 2} {
			mix := func(v uint8) uint8 { return uint8((int(v)*(3-t) + 255*t) / 3) }
			p = append(p, color.RGBA{mix(c.R), mix(c.G), mix(c.B), 0xff})
		}
	}
	for _, c := range palette {
		add(c)
	}
	for _, c := range []color.RGBA{named["unverifiable"], ink, muted, rule, band} {
		add(c)
	}
	for _, c := range palette {
		add(darker(c))
	}
	return p
}()

// text draws s with its top-left corner (or the alignment given) at x, y
// pixels from the top-left of the image.
func (m *image) text(f font.Font, size float64, clr color.Color, x, y float64, xa text.XAlignment, s string) {
	f.Size = px(size)
	sty := draw.TextStyle{Color: clr, Font: f, XAlign: xa, YAlign: text.YTop, Handler: plot.DefaultTextHandler}
	m.c.FillText(sty, vg.Point{X: px(x), Y: m.c.Max.Y - px(y)}, s)
}

func (m *image) rect(clr color.Color, x0, y0, x1, y1 float64) {
	top := m.c.Max.Y
	m.c.FillPolygon(clr, []vg.Point{{X: px(x0), Y: top - px(y0)}, {X: px(x1), Y: top - px(y0)},
		{X: px(x1), Y: top - px(y1)}, {X: px(x0), Y: top - px(y1)}})
}

func (m *image) hline(clr color.Color, x0, x1, y float64) {
	top := m.c.Max.Y
	m.c.StrokeLine2(draw.LineStyle{Color: clr, Width: px(1)}, px(x0), top-px(y), px(x1), top-px(y))
}

func textWidth(f font.Font, size float64, s string) float64 {
	f.Size = px(size)
	w, _, _ := plot.DefaultTextHandler.Box(s, f)
	return float64(w) * dpi / 72
}

// Values of the rows, as chdbtest decodes them.

func isTimeType(typ string) bool {
	return strings.HasPrefix(strings.TrimPrefix(typ, "Nullable("), "DateTime")
}

func isNumericType(typ string) bool {
	typ = strings.TrimPrefix(strings.TrimPrefix(typ, "Nullable("), "LowCardinality(")
	for _, p := range []string{"UInt", "Int", "Float", "Decimal"} {
		if strings.HasPrefix(typ, p) {
			return true
		}
	}
	return false
}

// parseTime reads a DateTime or DateTime64 as ClickHouse prints it (UTC).
func parseTime(v any) (time.Time, bool) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, false
	}
	t, err := time.ParseInLocation("2006-01-02 15:04:05.999999999", s, time.UTC)
	return t, err == nil
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case uint64:
		return float64(x), true
	case int64:
		return float64(x), true
	case float64:
		return x, true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

// unixSeconds is a time as the plots' x values.
func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// formatValue writes a number in the panel's unit as Grafana would, near
// enough: percentunit as a percentage, others plain.
func formatValue(v float64, unit string) string {
	if unit == "percentunit" {
		return strconv.FormatFloat(v*100, 'f', 1, 64) + "%"
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// A series is one line or one stack layer: Grafana's wide frame of a long
// result (format 0): one per numeric column and combination of labels.
type series struct {
	name string
	at   map[float64]float64 // x (unix seconds) -> value
}

func seriesOf(rs []*chdbtest.Result) ([]*series, error) {
	var out []*series
	byName := map[string]*series{}
	for _, r := range rs {
		if len(r.Columns) == 0 || !isTimeType(r.Columns[0].Type) {
			return nil, fmt.Errorf("first column is no time: %v", r.Columns)
		}
		var labels, nums []int
		for i, c := range r.Columns[1:] {
			if isNumericType(c.Type) {
				nums = append(nums, i+1)
			} else {
				labels = append(labels, i+1)
			}
		}
		for _, row := range r.Rows {
			t, ok := parseTime(row[0])
			if !ok {
				return nil, fmt.Errorf("time %v", row[0])
			}
			var lv []string
			for _, i := range labels {
				lv = append(lv, fmt.Sprint(row[i]))
			}
			for _, i := range nums {
				// Grafana's display name here is the label (the panels set
				// ${__field.labels.<label>}), or the column without one.
				name := strings.Join(lv, " ")
				if name == "" || len(nums) > 1 {
					name = strings.TrimSpace(r.Columns[i].Name + " " + name)
				}
				s := byName[name]
				if s == nil {
					s = &series{name: name, at: map[float64]float64{}}
					byName[name] = s
					out = append(out, s)
				}
				v, _ := toFloat(row[i])
				s.at[unixSeconds(t)] += v
			}
		}
	}
	return out, nil
}

// stackedBars draws series as bars stacked at each x, as Grafana's bars
// with stacking "normal".
type stackedBars struct {
	series []*series
	colors []color.RGBA
	width  float64 // of a bar, in x units
}

func (b *stackedBars) xs() []float64 {
	seen := map[float64]bool{}
	var xs []float64
	for _, s := range b.series {
		for x := range s.at {
			if !seen[x] {
				seen[x] = true
				xs = append(xs, x)
			}
		}
	}
	sort.Float64s(xs)
	return xs
}

func (b *stackedBars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for _, x := range b.xs() {
		base := 0.0
		for i, s := range b.series {
			v := s.at[x]
			if v == 0 {
				continue
			}
			x0, x1 := trX(x-b.width*0.45), trX(x+b.width*0.45)
			if x1-x0 < px(2) {
				x1 = x0 + px(2)
			}
			y0, y1 := trY(base), trY(base+v)
			c.FillPolygon(b.colors[i], c.ClipPolygonXY([]vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}))
			base += v
		}
	}
}

func (b *stackedBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	xs := b.xs()
	if len(xs) == 0 {
		return 0, 1, 0, 1
	}
	for _, x := range xs {
		sum := 0.0
		for _, s := range b.series {
			sum += s.at[x]
		}
		ymax = math.Max(ymax, sum)
	}
	return xs[0], xs[len(xs)-1], 0, ymax
}

// unitTicks labels the y axis in the panel's unit, counts as integers.
type unitTicks struct{ unit string }

func (u unitTicks) Ticks(min, max float64) []plot.Tick {
	var out []plot.Tick
	for _, t := range (plot.DefaultTicks{}).Ticks(min, max) {
		if t.Label != "" {
			if u.unit != "percentunit" && t.Value != math.Trunc(t.Value) {
				t.Label = ""
				if max-min < 4 {
					continue
				}
			} else {
				t.Label = formatValue(t.Value, u.unit)
			}
		}
		out = append(out, t)
	}
	return out
}

func drawTimeSeries(p *panel, rs []*chdbtest.Result, data *dataset.Data, file string) error {
	ss, err := seriesOf(rs)
	if err != nil {
		return err
	}
	w := math.Max(700, float64(p.GridPos.W)*60)
	if w > 1000 {
		w = 1000
	}
	pl := plot.New()
	pl.Title.Text = p.Title
	pl.Title.TextStyle.Font = sansBold
	pl.Title.TextStyle.Font.Size = px(15)
	pl.X.Min, pl.X.Max = unixSeconds(data.Query.From), unixSeconds(data.Query.To)
	pl.X.Tick.Marker = plot.TimeTicks{Format: "15:04:05"}
	pl.X.Label.Text = "time (UTC), interval " + data.Query.Interval.String()
	pl.Y.Min = 0
	if m := p.FieldConfig.Defaults.Max; m != nil {
		pl.Y.Max = *m
	}
	unit := p.FieldConfig.Defaults.Unit
	pl.Y.Tick.Marker = unitTicks{unit}
	pl.Add(plotter.NewGrid())
	var colors []color.RGBA
	for i, s := range ss {
		colors = append(colors, colorFor(s.name, i))
	}
	if p.FieldConfig.Defaults.Custom.DrawStyle == "bars" {
		pl.Add(&stackedBars{series: ss, colors: colors, width: data.Query.Interval.Seconds()})
		pl.Y.Label.Text = "per interval, stacked"
	} else {
		for i, s := range ss {
			var xys plotter.XYs
			for x, y := range s.at {
				xys = append(xys, plotter.XY{X: x, Y: y})
			}
			sort.Slice(xys, func(a, b int) bool { return xys[a].X < xys[b].X })
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			l.Color, l.Width = colors[i], px(2)
			pts.Color, pts.Shape, pts.Radius = colors[i], draw.CircleGlyph{}, px(3)
			pl.Add(l, pts)
		}
	}
	if len(ss) == 0 {
		pl.Y.Max = 1
		pl.Title.Text += " (no data)"
	}
	// The legend under the plot, as Grafana's list legend.
	legendH := 0.0
	if len(ss) > 0 {
		legendH = 26 * math.Ceil(legendWidth(ss)/(w-40))
	}
	h := 360 + legendH
	m := newImage(w, h)
	pl.Draw(draw.Crop(m.c, 0, 0, px(legendH), 0))
	x, y := 50.0, 360.0+4
	for i, s := range ss {
		lw := textWidth(sans, 12, s.name) + 34
		if x+lw > w-10 {
			x, y = 50, y+26
		}
		m.rect(colors[i], x, y+5, x+14, y+11)
		m.text(sans, 12, ink, x+20, y, text.XLeft, s.name)
		x += lw
	}
	return m.save(file)
}

func legendWidth(ss []*series) float64 {
	w := 50.0
	for _, s := range ss {
		w += textWidth(sans, 12, s.name) + 34
	}
	return w
}

// stat: each column of the row as a big number with its name, coloured by
// the panel's thresholds (Grafana's default: green, red from 80).
func drawStat(p *panel, rs []*chdbtest.Result, file string) error {
	type cell struct{ name, value string }
	var cells []cell
	var vals []float64
	for _, r := range rs {
		for i, c := range r.Columns {
			v := math.NaN()
			if len(r.Rows) > 0 {
				v, _ = toFloat(r.Rows[0][i])
			}
			s := "No data"
			if !math.IsNaN(v) {
				s = formatValue(v, p.unitOf(c.Name))
			}
			cells = append(cells, cell{c.Name, s})
			vals = append(vals, v)
		}
	}
	w := math.Max(420, float64(p.GridPos.W)*70)
	m := newImage(w, 170)
	m.text(sansBold, 15, ink, 14, 10, text.XLeft, p.Title)
	cw := (w - 20) / float64(len(cells))
	for i, c := range cells {
		cx := 10 + cw*(float64(i)+0.5)
		m.text(sansBold, 34, thresholdColor(p, vals[i]), cx, 50, text.XCenter, c.value)
		m.text(sans, 13, muted, cx, 110, text.XCenter, c.name)
	}
	m.hline(rule, 0, w, 169)
	return m.save(file)
}

// darker is a colour at 4/5 of its brightness, readable on white.
func darker(c color.RGBA) color.RGBA {
	d := func(v uint8) uint8 { return uint8(int(v) * 4 / 5) }
	return color.RGBA{d(c.R), d(c.G), d(c.B), 0xff}
}

func thresholdColor(p *panel, v float64) color.Color {
	if math.IsNaN(v) {
		return muted
	}
	type step struct {
		color string
		from  float64
	}
	steps := []step{{"green", math.Inf(-1)}, {"red", 80}}
	if th := p.FieldConfig.Defaults.Thresholds; th != nil {
		steps = steps[:0]
		for _, s := range th.Steps {
			from := math.Inf(-1)
			if s.Value != nil {
				from = *s.Value
			}
			steps = append(steps, step{s.Color, from})
		}
	}
	clr := "green"
	for _, s := range steps {
		if v >= s.from {
			clr = s.color
		}
	}
	if c, ok := named[clr]; ok {
		// darker than Grafana's, for a white page
		return darker(c)
	}
	return ink
}

// Tables: the first rows, each cell cut to a width, in a monospace font.
const (
	maxTableRows = 18
	maxCellChars = 44
	cellFont     = 12.0
)

func formatCell(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		if _, ok := parseTime(x); ok && len(x) > 23 {
			return x[:23] // to the millisecond
		}
		return strings.Join(strings.Fields(x), " ")
	case float64:
		return strconv.FormatFloat(x, 'g', 4, 64)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = formatCell(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	return fmt.Sprint(v)
}

func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func drawTable(p *panel, rs []*chdbtest.Result, file string) error {
	var cols []string
	var rows [][]string
	total := 0
	for _, r := range rs {
		for _, c := range r.Columns {
			cols = append(cols, c.Name)
		}
		total += len(r.Rows)
		for i, row := range r.Rows {
			if i == maxTableRows {
				break
			}
			cells := make([]string, len(row))
			for j, v := range row {
				cells[j] = cut(formatCell(v), maxCellChars)
			}
			rows = append(rows, cells)
		}
	}
	widths := make([]int, len(cols))
	for i, c := range cols {
		widths[i] = len([]rune(c))
		for _, r := range rows {
			widths[i] = max(widths[i], len([]rune(r[i])))
		}
	}
	charW := textWidth(mono, cellFont, "M")
	const pad, lineH, headH, top = 14.0, 20.0, 24.0, 40.0
	w := pad
	for _, cw := range widths {
		w += float64(cw)*charW + pad
	}
	w = math.Max(w, 480)
	footer := 0.0
	if total > len(rows) || total == 0 {
		footer = lineH + 6
	}
	h := top + headH + float64(len(rows))*lineH + footer + 10
	m := newImage(w, h)
	m.text(sansBold, 15, ink, pad, 10, text.XLeft, p.Title)
	m.rect(band, 0, top, w, top+headH)
	x := pad
	for i, c := range cols {
		m.text(monoBold, cellFont, ink, x, top+4, text.XLeft, c)
		x += float64(widths[i])*charW + pad
	}
	y := top + headH
	for _, r := range rows {
		m.hline(rule, 0, w, y)
		x := pad
		for i, c := range r {
			m.text(mono, cellFont, ink, x, y+3, text.XLeft, c)
			x += float64(widths[i])*charW + pad
		}
		y += lineH
	}
	m.hline(rule, 0, w, y)
	switch {
	case total == 0:
		m.text(sans, 12, muted, pad, y+6, text.XLeft, "No data")
	case total > len(rows):
		m.text(sans, 12, muted, pad, y+6, text.XLeft, fmt.Sprintf("first %d of %d rows", len(rows), total))
	}
	return m.save(file)
}
