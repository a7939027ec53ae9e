package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// plotResults reads JSON lines written by --json (as scripts/bench-compare.sh
// collects them) and draws two bar charts side by side, checks/s and p99,
// with the median of each run name, into a PNG file.
func plotResults(in, out string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	type agg struct{ rate, p99 []float64 }
	runs := map[string]*agg{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r struct {
			Name       string  `json:"name"`
			ChecksPerS float64 `json:"checks_per_s"`
			P99        float64 `json:"p99_ms"`
		}
		if json.Unmarshal(sc.Bytes(), &r) != nil || r.Name == "" {
			continue
		}
		a := runs[r.Name]
		if a == nil {
			a = &agg{}
			runs[r.Name] = a
		}
		a.rate = append(a.rate, r.ChecksPerS)
		a.p99 = append(a.p99, r.P99)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(runs) == 0 {
		return fmt.Errorf("--plot: no results in %s", in)
	}
	names := make([]string, 0, len(runs))
	for n := range runs {
		names = append(names, n)
	}
	sort.Strings(names)
	rates := make([]float64, len(names))
	p99s := make([]float64, len(names))
	for i, n := range names {
		rates[i], p99s[i] = median(runs[n].rate), median(runs[n].p99)
	}
	const w, h = 1200, 520
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	drawBars(img, image.Rect(20, 40, w/2-10, h-20), "checks/s (median)", names, rates, "%.0f")
	drawBars(img, image.Rect(w/2+10, 40, w-20, h-20), "p99 latency, ms (median)", names, p99s, "%.2f")
	legend := "ringlimit (blue) and the baselines (grey)"
	if slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "base-") }) {
		legend = "ringlimit (blue), the base build (light blue) and the baselines (grey)"
	}
	label(img, 20, 22, legend+", medians of the runs in "+filepath.Base(in), color.Black)
	o, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := png.Encode(o, img); err != nil {
		o.Close()
		return err
	}
	return o.Close()
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// drawBars draws one horizontal bar per name in r, scaled to the largest
// value, ringlimit runs in blue, runs of the base build that
// scripts/bench-compare.sh compares with (BENCH_BASE_REV, names starting
// with "base-") in light blue, and the others in grey.
func drawBars(img *image.RGBA, r image.Rectangle, title string, names []string, vals []float64, format string) {
	label(img, r.Min.X, r.Min.Y+12, title, color.Black)
	top := slices.Max(vals)
	if top <= 0 {
		top = 1
	}
	rowH := (r.Dy() - 24) / len(names)
	left := r.Min.X + 190
	width := r.Max.X - left - 70
	for i, n := range names {
		y := r.Min.Y + 24 + i*rowH
		label(img, r.Min.X, y+rowH/2+4, n, color.Black)
		c := color.RGBA{150, 150, 150, 255}
		switch {
		case strings.HasPrefix(n, "ringlimit"):
			c = color.RGBA{40, 100, 200, 255}
		case strings.HasPrefix(n, "base-"):
			c = color.RGBA{140, 180, 230, 255}
		}
		bw := int(float64(width) * vals[i] / top)
		draw.Draw(img, image.Rect(left, y+3, left+bw, y+rowH-3), &image.Uniform{c}, image.Point{}, draw.Src)
		label(img, left+bw+4, y+rowH/2+4, fmt.Sprintf(format, vals[i]), color.Black)
	}
}

func label(img *image.RGBA, x, y int, s string, c color.Color) {
	d := &font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}
