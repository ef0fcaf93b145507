package timeline

import "html/template"

// style is shared by every page. The shaded target makes the chart a verdict row
// links to stand out when the link is followed.
const style = `
body { font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 70rem; color: #222; line-height: 1.4; }
h1 { font-size: 1.5rem; margin-bottom: .3rem; }
h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
h3 { font-size: 1rem; margin: .2rem 0; }
code { font-size: .95em; }
.meta { color: #555; font-size: .9rem; }
.verdict { font-weight: bold; padding: 0 .4em; border-radius: .2em; color: #fff; }
.PASS { background: #2ca02c; } .FAIL { background: #d62728; } .INVALID { background: #ff7f0e; } .LESSON { background: #1f77b4; }
table { border-collapse: collapse; font-size: .85rem; width: 100%; }
th, td { text-align: left; padding: .2rem .5rem; border-bottom: 1px solid #eee; vertical-align: top; }
th { background: #f5f5f5; }
tr.failed td { background: #fdecea; }
tr.validity td:first-child { font-weight: bold; }
.legend p { margin: .2rem 0; }
.legend span.swatch { display: inline-block; width: 1.2em; height: .9em; vertical-align: middle; margin: 0 .3em 0 1em; border: 1px solid #aaa; }
.legend span.dash { display: inline-block; width: 1.2em; vertical-align: middle; margin: 0 .3em 0 1em; border-top: 2px dashed #000; }
section.chart { margin: .8rem 0; padding: .3rem; border-radius: .3rem; }
section.chart:target { outline: 3px solid #1f77b4; }
section.chart p { margin: 0 0 .2rem; font-size: .85rem; color: #444; }
svg { max-width: 100%; height: auto; display: block; }
.grid { display: grid; gap: .8rem; }
.cols-2 { grid-template-columns: 1fr 1fr; }
.cards { grid-template-columns: repeat(auto-fill, minmax(20rem, 1fr)); }
.card { border: 1px solid #ddd; border-radius: .3rem; padding: .5rem; }
.card p { font-size: .85rem; margin: .2rem 0; }
`

// legendBlock names the faults of a run: the kinds of window shaded behind the charts,
// each once with its colour, and the disruptions drawn as dashed lines, each once with
// its times. A run without windows says so instead of pointing at shading that is not
// there.
const legendBlock = `{{define "legend"}}<div class="legend">
{{- if .Windows}}
<p>Shaded: the windows in which a fault was applied to the relay's connection to Kafka.
{{- range .Windows}}<span class="swatch" style="background: {{.CSS}}"></span><b class="fault">{{.Name}}</b> ({{.Meaning}}{{if .Count}}; {{.Count}} window{{if ne .Count 1}}s{{end}}{{end}}){{end}}</p>
{{- else}}
<p class="no-windows">Nothing is shaded: this run applied no fault window to the relay's connection to Kafka{{if .Marks}}; its faults are the dashed lines{{end}}.</p>
{{- end}}
{{- if .Marks}}
<p><span class="dash"></span>Dashed lines, at the seconds given:
{{- range $i, $m := .Marks}}{{if $i}};{{end}} <b class="fault">{{$m.What}}</b> at {{$m.At}} s{{end}}.</p>
{{- end}}
</div>{{end}}`

var pageTemplate = template.Must(template.New("page").Parse(legendBlock + `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>chaos {{.Report.Scenario}}: {{.Badge.Text}}</title>
<style>` + style + `</style>
</head>
<body>
<h1>Chaos run <code>{{.Report.Scenario}}</code> <span class="verdict {{.Badge.Class}}" title="{{.Badge.Title}}">{{.Badge.Text}}</span></h1>
<p class="meta">run {{.Report.RunID}}, started {{.Report.StartedAt.Format "2006-01-02 15:04:05 UTC"}}, {{printf "%.0f" .Report.DurationSeconds}} s on the {{.Report.Stack}} stack.
Sent {{.Report.PaymentsSent}} (+{{.Report.WarmupPayments}} warm-up), accepted {{.Report.APIAccepted}}, committed {{.Report.PaymentsCommitted}};
events in the topic {{.Report.EventsInTopic}} (unique {{.Report.UniqueEventsInTopic}}); decisions {{.Report.Decisions}}; lost {{.Report.Lost}};
duplicates delivered {{.Report.DuplicatesDelivered}}; drained {{printf "%.1f" .Report.DrainSeconds}} s after the load.</p>
<p><b>{{.Advice}}</b></p>

<h2 id="verdict">Verdict: validity rows first, then the service's</h2>
<table>
<tr><th>kind</th><th>check</th><th>want</th><th>got</th><th>verdict</th><th>see</th></tr>
{{- range .Rows}}
<tr class="{{.Kind}}{{if not .OK}} failed{{end}}"><td>{{.Kind}}</td><td>{{.Name}}</td><td>{{.Want}}</td><td>{{.Got}}</td>
<td>{{if not .OK}}FAILED{{else if .Off}}off{{else}}ok{{end}}</td><td><a href="#chart-{{.Chart}}">chart</a></td></tr>
{{- end}}
</table>

<h2 id="timeline">Timeline</h2>
{{- if .Description}}
<p class="meta">The scenario, as a full run applies it (-short shortens it): {{.Description}}.</p>
{{- end}}
{{template "legend" .Legend}}
{{- range .Charts}}
<section class="chart" id="chart-{{.ID}}">
<h3>{{.Title}}</h3>
<p>{{.Reading}}</p>
{{.SVG}}
</section>
{{- end}}
{{- if or .Notes .Report.Notes}}
<h2 id="notes">Notes</h2>
<ul>{{range .Notes}}<li>{{.}}</li>{{end}}{{range .Report.Notes}}<li>{{.}}</li>{{end}}</ul>
{{- end}}
</body>
</html>
`))

var indexTemplate = template.Must(template.New("index").Parse(legendBlock + `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>chaos: every scenario</title>
<style>` + style + `</style>
</head>
<body>
<h1>Chaos runs: every scenario</h1>
{{- if .Lesson}}
<h2 id="lesson">The lesson: the outbox and the dual write under the same faults, on the same axes</h2>
{{template "legend" .Legend}}
<div class="grid cols-2">
<div><h3><a href="chaos-{{.Outbox.Scenario}}.html">outbox ({{.Outbox.Scenario}})</a> <span class="verdict {{.OutboxBadge.Class}}" title="{{.OutboxBadge.Title}}">{{.OutboxBadge.Text}}</span></h3>
<p class="meta">committed {{.Outbox.PaymentsCommitted}}, decisions {{.Outbox.Decisions}}, lost {{.Outbox.Lost}}</p></div>
<div><h3><a href="chaos-{{.DualWrite.Scenario}}.html">dual write</a> <span class="verdict {{.DualWriteBadge.Class}}" title="{{.DualWriteBadge.Title}}">{{.DualWriteBadge.Text}}</span></h3>
<p class="meta">committed {{.DualWrite.PaymentsCommitted}}, decisions {{.DualWrite.Decisions}}, lost {{.DualWrite.Lost}}</p></div>
{{- range .Lesson}}
<section class="chart" id="lesson-{{.ID}}"><h3>{{.Title}}</h3><p>{{.Reading}}</p>{{.Left}}</section>
<section class="chart"><h3>&nbsp;</h3><p>&nbsp;</p>{{.Right}}</section>
{{- end}}
</div>
{{- end}}
<h2 id="scenarios">Every scenario, side by side</h2>
<div class="grid cards">
{{- range .Cards}}
<div class="card" id="card-{{.Report.Scenario}}">
<h3><a href="chaos-{{.Report.Scenario}}.html">{{.Report.Scenario}}</a> <span class="verdict {{.Badge.Class}}" title="{{.Badge.Title}}">{{.Badge.Text}}</span></h3>
<p>committed {{.Report.PaymentsCommitted}}, lost {{.Report.Lost}}, duplicates delivered {{.Report.DuplicatesDelivered}}, drained in {{printf "%.1f" .Report.DrainSeconds}} s</p>
<p><b>Payments committed, not decided yet</b></p>
{{.SVG}}
</div>
{{- end}}
</div>
</body>
</html>
`))
