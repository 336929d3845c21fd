package main

import (
	"fmt"
	"image/color"
	"math"
	"sort"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/replaywatch/replaywatch/dashboards"
	"github.com/replaywatch/replaywatch/dashboards/internal/dataset"
	"github.com/replaywatch/replaywatch/test/chdbtest"
)

// The session panels the swim lanes are drawn from.
const (
	eventsPanel   = "SSE events in order"
	resumesPanel  = "Resume attempts"
	findingsPanel = "Findings"
)

// table is a result read by column name.
type table struct {
	r   *chdbtest.Result
	col map[string]int
}

func tableOf(results map[string][]*chdbtest.Result, title string) (*table, error) {
	rs := results[title]
	if len(rs) != 1 {
		return nil, fmt.Errorf("panel %q: %d results, want 1", title, len(rs))
	}
	return newTable(rs[0]), nil
}

// newTable indexes r's columns by name.
func newTable(r *chdbtest.Result) *table {
	t := &table{r: r, col: map[string]int{}}
	for i, c := range r.Columns {
		t.col[c.Name] = i
	}
	return t
}

func (t *table) get(row []any, name string) any {
	i, ok := t.col[name]
	if !ok {
		return nil
	}
	return row[i]
}

func (t *table) str(row []any, name string) string { return formatCell(t.get(row, name)) }

func (t *table) num(row []any, name string) float64 {
	v, _ := toFloat(t.get(row, name))
	return v
}

func (t *table) time(row []any) float64 {
	tm, _ := parseTime(t.get(row, "time"))
	return unixSeconds(tm)
}

// drawSwimLanes draws the chosen session: a lane per SSE stream, each event
// at its time and, within the lane, at a height by its position in the
// stream (so a replay, which goes back in position, is a drop), coloured
// by the delivery (connection) it came on; resume attempts as triangles
// coloured by outcome; findings as red lines. It returns how many rows it
// drew.
func drawSwimLanes(results map[string][]*chdbtest.Result, data *dataset.Data, file string) (int, error) {
	events, err := tableOf(results, eventsPanel)
	if err != nil {
		return 0, err
	}
	resumes, err := tableOf(results, resumesPanel)
	if err != nil {
		return 0, err
	}
	findings, err := tableOf(results, findingsPanel)
	if err != nil {
		return 0, err
	}
	// Lanes in order of first appearance.
	type lane struct {
		first, maxPos float64
	}
	lanes := map[string]*lane{}
	xmin, xmax := math.Inf(1), math.Inf(-1)
	see := func(t *table, row []any) {
		x := t.time(row)
		xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
		id := t.str(row, "stream")
		if id == "" {
			return
		}
		l := lanes[id]
		if l == nil {
			l = &lane{first: x}
			lanes[id] = l
		}
		l.first = math.Min(l.first, x)
		l.maxPos = math.Max(l.maxPos, t.num(row, "position"))
	}
	n := 0
	for _, t := range []*table{events, resumes, findings} {
		for _, row := range t.r.Rows {
			see(t, row)
			n++
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("the session has no events, resumes or findings")
	}
	ids := make([]string, 0, len(lanes))
	for id := range lanes {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool {
		la, lb := lanes[ids[a]], lanes[ids[b]]
		return la.first < lb.first || la.first == lb.first && ids[a] < ids[b]
	})
	base := map[string]float64{}
	var ticks []plot.Tick
	for i, id := range ids {
		base[id] = float64(len(ids) - 1 - i)
		ticks = append(ticks, plot.Tick{Value: base[id] + 0.45, Label: cut(id, 24)})
	}
	laneY := func(id string, pos float64) float64 {
		l := lanes[id]
		if l == nil || l.maxPos == 0 {
			return base[id] + 0.1
		}
		return base[id] + 0.1 + 0.7*pos/l.maxPos
	}

	pl := plot.New()
	pl.Title.Text = "Session " + data.Query.Vars[dashboards.SessionVar] + ": SSE streams, resumes and findings"
	pl.Title.TextStyle.Font = sansBold
	pl.Title.TextStyle.Font.Size = px(15)
	zoomTime(pl, xmin, xmax)
	pl.X.Label.Text = "time (UTC)"
	pl.Y.Min, pl.Y.Max = -0.15, float64(len(ids))+0.05
	pl.Y.Tick.Marker = plot.ConstantTicks(ticks)
	pl.Y.Label.Text = "SSE stream (height: position)"
	pl.Add(plotter.NewGrid())

	// Lane bands.
	for _, id := range ids {
		pl.Add(&laneBand{y0: base[id], y1: base[id] + 0.9, fill: band})
	}

	// Findings first, under the rest.
	var kinds []string
	for _, row := range findings.r.Rows {
		x := findings.time(row)
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: pl.Y.Min}, {X: x, Y: pl.Y.Max}})
		if err != nil {
			return 0, err
		}
		l.Color, l.Width, l.Dashes = named["critical"], px(2), []vg.Length{px(6), px(4)}
		pl.Add(l)
		kinds = append(kinds, findings.str(row, "kind"))
	}

	// Events by delivery, each with its position as a label when few.
	deliveries := map[float64]plotter.XYs{}
	var labels plotter.XYLabels
	for _, row := range events.r.Rows {
		id := events.str(row, "stream")
		pos := events.num(row, "position")
		xy := plotter.XY{X: events.time(row), Y: laneY(id, pos)}
		d := events.num(row, "delivery")
		deliveries[d] = append(deliveries[d], xy)
		labels.XYs = append(labels.XYs, xy)
		labels.Labels = append(labels.Labels, fmt.Sprintf("%.0f", pos))
	}
	var ds []float64
	for d := range deliveries {
		ds = append(ds, d)
	}
	sort.Float64s(ds)
	type entry struct {
		name  string
		color color.Color
		glyph draw.GlyphDrawer
	}
	var legend []entry
	deliveryColors := []color.RGBA{palette[5], palette[3], palette[6], palette[9], palette[8]}
	for i, d := range ds {
		sc, err := plotter.NewScatter(deliveries[d])
		if err != nil {
			return 0, err
		}
		c := deliveryColors[i%len(deliveryColors)]
		sc.Color, sc.Shape, sc.Radius = c, draw.CircleGlyph{}, px(4)
		pl.Add(sc)
		name := fmt.Sprintf("event, delivery %.0f", d)
		if i > 0 {
			name += " (after a resume)"
		}
		legend = append(legend, entry{name, c, draw.CircleGlyph{}})
	}
	if len(labels.XYs) <= 60 {
		lb, err := plotter.NewLabels(labels)
		if err != nil {
			return 0, err
		}
		for i := range lb.TextStyle {
			lb.TextStyle[i].Font = sans
			lb.TextStyle[i].Font.Size = px(10)
			lb.TextStyle[i].Color = muted
		}
		lb.Offset = vg.Point{X: px(5), Y: px(3)}
		pl.Add(lb)
	}

	// Resume attempts, at the top of their lane.
	byOutcome := map[string]plotter.XYs{}
	for _, row := range resumes.r.Rows {
		id := resumes.str(row, "stream")
		y := base[id] + 0.85
		if _, ok := lanes[id]; !ok {
			y = pl.Y.Max - 0.1
		}
		o := resumes.str(row, "outcome")
		byOutcome[o] = append(byOutcome[o], plotter.XY{X: resumes.time(row), Y: y})
	}
	var outcomes []string
	for o := range byOutcome {
		outcomes = append(outcomes, o)
	}
	sort.Strings(outcomes)
	for i, o := range outcomes {
		sc, err := plotter.NewScatter(byOutcome[o])
		if err != nil {
			return 0, err
		}
		c := colorFor(o, i+2)
		sc.Color, sc.Shape, sc.Radius = c, draw.PyramidGlyph{}, px(7)
		pl.Add(sc)
		legend = append(legend, entry{"resume " + o, c, draw.PyramidGlyph{}})
	}
	for _, k := range uniq(kinds) {
		legend = append(legend, entry{"finding " + k, named["critical"], nil})
	}

	const w, plotH = 1100.0, 460.0
	legendH := 26 * math.Ceil(func() float64 {
		lw := 50.0
		for _, e := range legend {
			lw += textWidth(sans, 12, e.name) + 40
		}
		return lw
	}()/(w-40))
	m := newImage(w, plotH+legendH+8)
	pl.Draw(draw.Crop(m.c, 0, 0, px(legendH+8), 0))
	x, y := 50.0, plotH+6
	for _, e := range legend {
		lw := textWidth(sans, 12, e.name) + 40
		if x+lw > w-10 {
			x, y = 50, y+26
		}
		if e.glyph != nil {
			m.c.DrawGlyph(draw.GlyphStyle{Color: e.color, Shape: e.glyph, Radius: px(5)},
				vg.Point{X: px(x + 8), Y: m.c.Max.Y - px(y+9)})
		} else {
			m.c.StrokeLine2(draw.LineStyle{Color: e.color, Width: px(2), Dashes: []vg.Length{px(4), px(3)}},
				px(x+7), m.c.Max.Y-px(y+1), px(x+7), m.c.Max.Y-px(y+17))
		}
		m.text(sans, 12, ink, x+20, y+1, text.XLeft, e.name)
		x += lw
	}
	return n, m.save(file)
}

// zoomTime makes the plot's x axis the times from xmin to xmax, padded,
// with ticks to the millisecond when they span seconds.
func zoomTime(pl *plot.Plot, xmin, xmax float64) {
	span := xmax - xmin
	pad := math.Max(span*0.04, 0.05)
	pl.X.Min, pl.X.Max = xmin-pad, xmax+pad
	format := "15:04:05"
	if span < 20 {
		format = "15:04:05.000"
	}
	pl.X.Tick.Marker = plot.TimeTicks{Format: format, Time: unixTime}
}

// unixTime is plot.UTCUnixTime to the nanosecond.
func unixTime(t float64) time.Time {
	sec, frac := math.Modf(t)
	return time.Unix(int64(sec), int64(frac*1e9)).UTC()
}

func uniq(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// laneBand shades a lane.
type laneBand struct {
	y0, y1 float64
	fill   color.Color
}

func (b *laneBand) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	x0, x1 := trX(p.X.Min), trX(p.X.Max)
	y0, y1 := trY(b.y0), trY(b.y1)
	c.FillPolygon(b.fill, c.ClipPolygonXY([]vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}))
}
