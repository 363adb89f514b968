"""Building blocks of the dashboards (dashboards/generate): the datasource, selectors, the
variables every dashboard has, and panels in the house style, made with the Grafana Foundation
SDK's builders (deploy/README.md, "Dashboards")."""

import json

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as pb
from grafana_foundation_sdk.builders import heatmap, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import heatmap as hm
from grafana_foundation_sdk.models import prometheus as pm

DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
TAG = "rdma-probe-exporter"
# Red below the alerts' degraded ratio, orange up to 0.9, green above.
RATIO_STEPS = [(None, "red"), (0.7, "orange"), (0.9, "green")]


def sel(*extra, node=True, device=True, peer=True):
    """The label selector of the dashboard's variables: {job="$job", instance=~"$node", ...}."""
    parts = ['job="$job"']
    if node:
        parts.append('instance=~"$node"')
    if device:
        parts.append('device=~"$device"')
    if peer:
        parts.append('peer=~"$peer"')
    return "{" + ", ".join(parts + list(extra)) + "}"


def query(ref, expr, legend=None, instant=False, fmt=None):
    q = pb.Dataquery().ref_id(ref).expr(expr)
    q = q.instant() if instant else q.range()
    if legend:
        q = q.legend_format(legend)
    if fmt == "table":
        q = q.format(pm.PromQueryFormat.TABLE)
    elif fmt == "heatmap":
        q = q.format(pm.PromQueryFormat.HEATMAP)
    return q


def thresholds(steps):
    return db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(
        [dm.Threshold(value=v, color=c) for v, c in steps])


def value_map(**texts):
    """{value: (text, color)} as one value mapping."""
    return dm.ValueMap(options={v: dm.ValueMappingResult(text=t, color=c, index=i)
                                for i, (v, (t, c)) in enumerate(texts.items())})


def prop(id_val, value):
    return dm.DynamicConfigValue(id_val=id_val, value=value)


def link(title, url):
    return db.DashboardLink(title).url(url)


class Finished(cogbuilder.Builder[dm.Panel]):
    """A panel builder whose built panel gets what its builder has no method for (a table's
    cell options): `fn(panel)` runs after build."""

    def __init__(self, inner, fn):
        self.inner, self.fn = inner, fn

    def build(self):
        p = self.inner.build()
        self.fn(p)
        return p


def _common(p, title, description, w, h, targets):
    p = p.title(title).description(description).datasource(DS).span(w).height(h)
    for t in targets:
        p = p.with_target(t)
    return p


def timeseries_panel(title, description, w, h, targets, unit="short", calcs=("lastNotNull", "min", "max"),
                     bars=False, threshold=None, decimals=None):
    p = _common(timeseries.Panel(), title, description, w, h, targets).unit(unit)
    p = (p.legend(cb.VizLegendOptions().display_mode(cm.LegendDisplayMode.TABLE)
                  .placement(cm.LegendPlacement.BOTTOM).show_legend(True).calcs(list(calcs)))
         .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING))
         .line_width(1).show_points(cm.VisibilityMode.NEVER).span_nulls(False).axis_soft_min(0)
         .color_scheme(db.FieldColor().mode(dm.FieldColorModeId.PALETTE_CLASSIC)))
    if bars:
        p = (p.draw_style(cm.GraphDrawStyle.BARS).fill_opacity(80)
             .stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL).group("A")))
    else:
        p = p.draw_style(cm.GraphDrawStyle.LINE).fill_opacity(10)
    if threshold is not None:
        p = (p.thresholds_style(cb.GraphThresholdsStyleConfig().mode(cm.GraphTresholdsStyleMode.DASHED))
             .thresholds(thresholds(threshold)))
    if decimals is not None:
        p = p.decimals(decimals)
    return p


def stat_panel(title, description, w, h, targets, steps, unit="short", decimals=None, names=False):
    p = _common(stat.Panel(), title, description, w, h, targets).unit(unit)
    p = (p.color_scheme(db.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS)).thresholds(thresholds(steps))
         .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False))
         .color_mode(cm.BigValueColorMode.BACKGROUND).graph_mode(cm.BigValueGraphMode.AREA)
         .justify_mode(cm.BigValueJustifyMode.AUTO).orientation(cm.VizOrientation.AUTO)
         .text_mode(cm.BigValueTextMode.VALUE_AND_NAME if names else cm.BigValueTextMode.AUTO))
    if decimals is not None:
        p = p.decimals(decimals)
    return p


def table_panel(title, description, w, h, targets, transformations=(), links=(), cells=None,
                overrides=(), sort_by=None, unit=None, decimals=None, steps=None):
    """A table; `cells` "color-background" colours every number cell by the thresholds `steps`."""
    p = _common(table.Panel(), title, description, w, h, targets)
    p = p.show_header(True).cell_height(cm.TableCellHeight.SM).footer(
        cb.TableFooterOptions().show(False).reducer(["sum"]).fields([]))
    if unit:
        p = p.unit(unit)
    if decimals is not None:
        p = p.decimals(decimals)
    if steps:
        p = p.color_scheme(db.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS)).thresholds(thresholds(steps))
    for t in transformations:
        p = p.with_transformation(t)
    if links:
        p = p.data_links(list(links))
    for kind, match, props in overrides:
        p = p.override_by_name(match, props) if kind == "name" else (
            p.override_by_regexp(match, props) if kind == "regexp" else p.override_by_field_type(match, props))
    if sort_by:
        p = p.sort_by([cb.TableSortByFieldState().display_name(sort_by).desc(False)])
    if cells:
        p = p.override_by_field_type("string", [prop("custom.cellOptions", {"type": "auto"}),
                                                prop("custom.align", "left")])

    def custom(panel):
        panel.field_config.defaults.custom = (
            {"align": "center", "cellOptions": {"type": cells, "mode": "basic"}} if cells
            else {"align": "auto", "cellOptions": {"type": "auto"}})
    return Finished(p, custom)


def heatmap_panel(title, description, w, h, targets, unit="s"):
    """A heatmap of histogram buckets as Prometheus returns them (format heatmap: one series per
    `le`), not calculated by Grafana; the y axis in `unit`."""
    p = _common(heatmap.Panel(), title, description, w, h, targets)
    return (p.calculate(False).y_axis(heatmap.YAxisConfig().unit(unit))
            .color(heatmap.HeatmapColorOptions().mode(hm.HeatmapColorMode.SCHEME).scheme("Oranges")
                   .scale(hm.HeatmapColorScale.EXPONENTIAL).exponent(0.5).steps(64).fill("dark-orange")
                   .reverse(False))
            .cell_values(heatmap.CellValues().unit("short")).cell_gap(1).show_value(cm.VisibilityMode.NEVER)
            .show_legend().show_tooltip().show_y_histogram()
            .filter_values(heatmap.FilterValueRange().le(1e-9))
            .rows_frame(heatmap.RowsHeatmapOptions().layout(cm.HeatmapCellLayout.LE)))


def state_panel(title, description, w, h, targets, texts):
    p = _common(statetimeline.Panel(), title, description, w, h, targets)
    return (p.color_scheme(db.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS))
            .thresholds(thresholds([(None, "red"), (1, "green")]))
            .mappings([value_map(**texts)])
            .show_value(cm.VisibilityMode.NEVER).merge_values(True).row_height(0.9)
            .align_value(cm.TimelineValueAlignment.LEFT)
            .legend(cb.VizLegendOptions().display_mode(cm.LegendDisplayMode.LIST)
                    .placement(cm.LegendPlacement.BOTTOM).show_legend(True))
            .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.SINGLE).sort(cm.SortOrder.NONE)))


def transform(id_val, options):
    return dm.DataTransformerConfig(id_val=id_val, options=options)


def organize(exclude=(), index=None, rename=None):
    return transform("organize", {"excludeByName": {k: True for k in exclude},
                                  "indexByName": index or {}, "renameByName": rename or {}})


def matrix(row, column, value="Value"):
    return transform("groupingToMatrix", {"columnField": column, "rowField": row, "valueField": value})


# ----------------------------------------------------------------------------- variables

def datasource_variable():
    return db.DatasourceVariable("datasource").label("Data source").type("prometheus")


def query_variable(name, label, q, multi=True, include_all=True, regex="", ordered=True,
                   all_value=".*", hidden=False):
    """A Prometheus query variable refreshed with the time range; `ordered` False keeps the
    query's own order (a worst-first query_result), so that its first value is the default.
    `all_value` None: "All" stands for the list of every value (`(a|b|...)` in a regex), which
    lets Prometheus select by its index where `.*` would read every series."""
    v = (db.QueryVariable(name).label(label).datasource(DS).query(q)
         .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).multi(multi).include_all(include_all)
         .sort(dm.VariableSort.ALPHABETICAL_ASC if ordered else dm.VariableSort.DISABLED))
    if hidden:
        v = v.hide(dm.VariableHide.HIDE_VARIABLE)
    if include_all and all_value is not None:
        v = v.all_value(all_value)
    if regex:
        v = v.regex(regex)
    return v


def job_variable():
    return query_variable("job", "Job", "label_values(rdma_probe_build_info, job)", multi=False,
                          include_all=False)


def dashboard(uid, title, description, time_from):
    return (db.Dashboard(title).uid(uid).description(description).tags(["rdma", TAG])
            .editable().tooltip(dm.DashboardCursorSync.CROSSHAIR).timezone("").refresh("1m")
            .time(time_from, "now").week_start("")
            .link(db.DashboardLink("RDMA probe dashboards").type(dm.DashboardLinkType.DASHBOARDS)
                  .tags([TAG]).as_dropdown(True).include_vars(True).keep_time(True).icon("external link"))
            .annotation(db.AnnotationQuery().name("Annotations & Alerts").type("dashboard")
                        .datasource(dm.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
                        .enable(True).hide(True).icon_color("rgba(0, 211, 255, 1)"))
            .with_variable(datasource_variable()).with_variable(job_variable()))


def render(builder):
    """The dashboard as Grafana's JSON model (a dict): panel ids in order, schema 39, and what
    the builders have no method for: each query variable's `definition` (what Grafana's editor
    shows) is its query, and the built-in annotation is marked so."""
    d = builder.build()
    d.schema_version = 39
    d.version = 1
    for i, p in enumerate(d.panels or [], start=1):
        p.id_val = i
    model = json.loads(json.dumps(d, cls=JSONEncoder))
    for a in model["annotations"]["list"]:
        if a["name"] == "Annotations & Alerts":
            a["builtIn"] = 1  # Grafana's own annotations and alerts (no builder method)
    for v in model["templating"]["list"]:
        if v["type"] == "query":
            v["definition"] = v["query"]
    return model
