package main

// The flame graph picture of `make profile`, drawn from folded stacks
// ("a;b;c count") with the plotting library's canvas: each frame a box as
// wide as its share of the samples, callers below callees, the first level
// being the share the sample was put in (profile_stacks.go).

import (
	"fmt"
	"hash/fnv"
	"image/color"
	"image/png"
	"os"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// flameNode is one frame in the merged call tree.
type flameNode struct {
	name     string
	value    uint64
	children map[string]*flameNode
}

func (n *flameNode) child(name string) *flameNode {
	c := n.children[name]
	if c == nil {
		c = &flameNode{name: name, children: map[string]*flameNode{}}
		n.children[name] = c
	}
	return c
}

// parseFolded reads "frame;frame;leaf count" lines into a tree.
func parseFolded(text string) (*flameNode, error) {
	root := &flameNode{name: "all", children: map[string]*flameNode{}}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			return nil, fmt.Errorf("folded line %d: no count: %q", i+1, line)
		}
		v, err := strconv.ParseUint(line[sp+1:], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("folded line %d: %w", i+1, err)
		}
		n := root
		n.value += v
		for _, f := range strings.Split(line[:sp], ";") {
			n = n.child(f)
			n.value += v
		}
	}
	if root.value == 0 {
		return nil, fmt.Errorf("no samples in the folded stacks")
	}
	return root, nil
}

// depth is the tree's depth below n.
func (n *flameNode) depth() int {
	d := 0
	for _, c := range n.children {
		d = max(d, c.depth())
	}
	return d + 1
}

// sorted lists the children: shares in table order at the first level,
// alphabetical below (as flame graphs do, so equal stacks line up).
func (n *flameNode) sorted(top bool) []*flameNode {
	out := make([]*flameNode, 0, len(n.children))
	for _, c := range n.children {
		out = append(out, c)
	}
	rank := func(s string) int {
		for i, sh := range shareOrder {
			if sh == s {
				return i
			}
		}
		return len(shareOrder)
	}
	sort.Slice(out, func(i, j int) bool {
		if top && rank(out[i].name) != rank(out[j].name) {
			return rank(out[i].name) < rank(out[j].name)
		}
		return out[i].name < out[j].name
	})
	return out
}

// Sizes of the picture, in points (1/72 in; 96 dpi in the PNG).
const (
	flameW    = 16 * vg.Inch
	flameRow  = vg.Length(12)
	flameHead = vg.Length(44)
	flameMaxD = 60 // deeper stacks are cut (rare; Go's deepest here are ~40)
)

// writeFlame draws a flame graph of the folded stacks into a PNG, with the
// title and a subtitle (the shares) above it.
func writeFlame(path, title, subtitle, folded string) error {
	root, err := parseFolded(folded)
	if err != nil {
		return err
	}
	d := min(root.depth(), flameMaxD)
	h := flameHead + vg.Length(d)*flameRow + 6
	img := vgimg.NewWith(vgimg.UseWH(flameW, h), vgimg.UseDPI(96), vgimg.UseBackgroundColor(color.White))
	c := draw.New(img)
	label := flameLabelStyle()
	head := label
	head.Font = font.From(plot.DefaultFont, 12)
	head.YAlign = draw.YTop
	c.FillText(head, vg.Point{X: 6, Y: h - 4}, title)
	head.Font = font.From(plot.DefaultFont, 9)
	c.FillText(head, vg.Point{X: 6, Y: h - 22}, subtitle)

	scale := float64(flameW-12) / float64(root.value)
	var drawNode func(n *flameNode, x vg.Length, level int, share string)
	drawNode = func(n *flameNode, x vg.Length, level int, share string) {
		w := vg.Length(float64(n.value) * scale)
		if w < 0.4 || level >= d {
			return
		}
		y := 3 + vg.Length(level)*flameRow
		box := []vg.Point{{X: x, Y: y}, {X: x + w - 0.3, Y: y}, {X: x + w - 0.3, Y: y + flameRow - 0.6}, {X: x, Y: y + flameRow - 0.6}}
		c.FillPolygon(frameColor(share, n.name, level), box)
		if w > 18 {
			if t := fitText(label, shortSym(n.name), w-3); t != "" {
				c.FillText(label, vg.Point{X: x + 1.5, Y: y + flameRow/2}, t)
			}
		}
		cx := x
		for _, ch := range n.sorted(level == -1) {
			sh := share
			if level == -1 {
				sh = ch.name
			}
			drawNode(ch, cx, level+1, sh)
			cx += vg.Length(float64(ch.value) * scale)
		}
	}
	drawNode(root, 6, -1, "")
	// Best compression: the pictures are committed under docs/.
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(f, img.Image()); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// shortSym drops a Go symbol's package path for the label:
// github.com/kbridge/kbridge/tap/vnet.(*Super).Segment -> vnet.(*Super).Segment.
func shortSym(s string) string {
	end := strings.IndexAny(s, "(")
	if end < 0 {
		end = len(s)
	}
	if i := strings.LastIndexByte(s[:end], '/'); i >= 0 && !strings.HasPrefix(s, "[") {
		return s[i+1:]
	}
	return s
}

// flameLabelStyle is the frames' label font.
func flameLabelStyle() draw.TextStyle {
	return draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 8), Handler: plot.DefaultTextHandler, YAlign: draw.YCenter}
}

// fitText shortens s with ".." until it fits in w; "" when nothing does.
func fitText(sty draw.TextStyle, s string, w vg.Length) string {
	if sty.Width(s) <= w {
		return s
	}
	for n := len(s) - 1; n > 2; n-- {
		t := s[:n] + ".."
		if sty.Width(t) <= w {
			return t
		}
	}
	return ""
}

// shareHue is each share's colour family.
var shareHue = map[string]color.RGBA{
	shKbUser:  {214, 39, 40, 255},   // red: kbridge's own code
	shKbSys:   {255, 127, 14, 255},  // orange: its syscalls
	shTCP:     {31, 119, 180, 255},  // blue: TCP/IP for kb0
	shClient:  {44, 160, 44, 255},   // green
	shPeer:    {148, 103, 189, 255}, // purple
	shSoftNIC: {23, 190, 207, 255},  // cyan
	shSoftirq: {120, 200, 220, 255}, // pale cyan
	shBed:     {140, 86, 75, 255},   // brown
	shIdle:    {200, 200, 200, 255}, // grey
	shOther:   {188, 189, 34, 255},  // olive
}

// frameColor lightens the share's colour by a hash of the frame's name, so
// neighbouring frames stay apart and a frame keeps its colour across
// pictures.
func frameColor(share, name string, level int) color.Color {
	base, ok := shareHue[share]
	if !ok {
		base = color.RGBA{150, 150, 150, 255}
	}
	if level == 0 {
		return base
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	f := 0.35 + 0.4*float64(h.Sum32()%1000)/1000 // mix with white
	mix := func(v uint8) uint8 { return uint8(float64(v) + (255-float64(v))*f) }
	return color.RGBA{mix(base.R), mix(base.G), mix(base.B), 255}
}
