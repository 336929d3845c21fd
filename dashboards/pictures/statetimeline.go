package main

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/replaywatch/replaywatch/test/chdbtest"
)

// stateSpan is one value of a state timeline, from its time to the next
// row's.
type stateSpan struct {
	from, to float64
	state    string
}

// stateSpans reads a state timeline frame (a time, then the state; a null
// state ends the one before) into spans, each to the next row's time. A
// state that does not change merges with the one before, as the panel's
// mergeValues does.
func stateSpans(r *chdbtest.Result) ([]stateSpan, error) {
	if len(r.Columns) != 2 || !isTimeType(r.Columns[0].Type) {
		return nil, fmt.Errorf("columns %v: want a time and a state", r.Columns)
	}
	xs := make([]float64, len(r.Rows))
	for i, row := range r.Rows {
		tm, ok := parseTime(row[0])
		if !ok {
			return nil, fmt.Errorf("row %d: time %v", i, row[0])
		}
		xs[i] = unixSeconds(tm)
	}
	var out []stateSpan
	for i, row := range r.Rows {
		if row[1] == nil {
			continue
		}
		to := xs[i]
		if i+1 < len(xs) {
			to = xs[i+1]
		}
		state := formatCell(row[1])
		if n := len(out); n > 0 && out[n-1].state == state && out[n-1].to == xs[i] {
			out[n-1].to = to
			continue
		}
		out = append(out, stateSpan{from: xs[i], to: to, state: state})
	}
	return out, nil
}

// annotationColor is Grafana's marker colour by the story's tags.
func annotationColor(tag string) color.RGBA {
	switch tag {
	case "finding":
		return named["critical"]
	case "resume":
		return named["orange"]
	}
	return named["blue"]
}

// drawStateTimeline draws a state timeline panel: one band, each state a
// coloured span labelled with its value, zoomed to the data (a session
// lasts seconds in a range of hours), with the dashboard's annotations as
// dashed lines listed under the plot.
func drawStateTimeline(p *panel, rs []*chdbtest.Result, annotations []*chdbtest.Result, file string) error {
	if len(rs) != 1 {
		return fmt.Errorf("%d results, want one frame", len(rs))
	}
	spans, err := stateSpans(rs[0])
	if err != nil {
		return err
	}
	if len(spans) == 0 {
		return fmt.Errorf("no state")
	}
	var marks []annotation
	for _, a := range annotations {
		t := newTable(a)
		for _, row := range a.Rows {
			marks = append(marks, annotation{x: t.time(row), title: t.str(row, "title"), text: t.str(row, "text"),
				color: annotationColor(t.str(row, "tags"))})
		}
	}
	xmin, xmax := spans[0].from, spans[len(spans)-1].to
	for _, m := range marks {
		xmin, xmax = math.Min(xmin, m.x), math.Max(xmax, m.x)
	}
	pl := plot.New()
	pl.Title.Text = p.Title
	pl.Title.TextStyle.Font = sansBold
	pl.Title.TextStyle.Font.Size = px(15)
	zoomTime(pl, xmin, xmax)
	pl.X.Label.Text = "time (UTC), zoomed to the session"
	pl.Y.Min, pl.Y.Max = 0, 1
	pl.HideY()
	colors := map[string]color.RGBA{}
	for _, s := range spans {
		if _, ok := colors[s.state]; !ok {
			colors[s.state] = palette[len(colors)%len(palette)]
		}
	}
	pl.Add(&stateBand{spans: spans, colors: colors})
	pl.Add(annotationLines(marks))

	const w, plotH, lineH = 1100.0, 170.0, 20.0
	listH := lineH * float64(len(marks))
	img := newImage(w, plotH+listH+12)
	pl.Draw(draw.Crop(img.c, 0, 0, px(listH+12), 0))
	y := plotH + 6
	for _, m := range marks {
		img.rect(m.color, 50, y+5, 64, y+11)
		img.text(mono, 11, muted, 70, y+1, text.XLeft, unixTime(m.x).Format("15:04:05.000"))
		img.text(sansBold, 12, ink, 170, y, text.XLeft, m.title)
		img.text(sans, 12, muted, 170+textWidth(sansBold, 12, m.title)+12, y, text.XLeft, cut(m.text, 110))
		y += lineH
	}
	return img.save(file)
}

// stateBand draws the spans of a state timeline across the plot's height,
// each labelled with its state where it fits.
type stateBand struct {
	spans  []stateSpan
	colors map[string]color.RGBA
}

func (b *stateBand) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	y0, y1 := trY(0.1), trY(0.9)
	for _, s := range b.spans {
		x0, x1 := trX(s.from), trX(s.to)
		if x1-x0 < px(2) {
			x1 = x0 + px(2)
		}
		fill := b.colors[s.state]
		c.FillPolygon(fill, c.ClipPolygonXY([]vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}))
		f := monoBold
		f.Size = px(12)
		sty := draw.TextStyle{Color: ink, Font: f, XAlign: text.XCenter, YAlign: text.YCenter, Handler: plot.DefaultTextHandler}
		label := s.state
		for len(label) > 4 && sty.Width(label) > x1-x0-px(8) {
			label = cut(label, len([]rune(label))-4)
		}
		if sty.Width(label) <= x1-x0-px(4) {
			c.FillText(sty, vg.Point{X: (x0 + x1) / 2, Y: (y0 + y1) / 2}, label)
		}
	}
}

// annotation is one of the dashboard's annotations, as drawn.
type annotation struct {
	x           float64
	title, text string
	color       color.RGBA
}

// annotationLines draws each annotation as a dashed line across the plot.
type annotationLines []annotation

func (a annotationLines) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for _, m := range a {
		x := trX(m.x)
		c.StrokeLine2(draw.LineStyle{Color: m.color, Width: px(2), Dashes: []vg.Length{px(5), px(3)}}, x, trY(0), x, trY(1))
	}
}
