// lenscope ui: an attribution graph laid out and drawn as SVG: tokens along the bottom (one column per prompt
// position, labelled with its token), logits at the top, each layer's features and error nodes in between.
"use strict";

var GraphDraw = (function () {
  var NS = "http://www.w3.org/2000/svg";
  var LEFT = 62, RIGHT = 14, TOP = 34, BOTTOM = 42, STEP = 22, MAX_STEP = 34, MIN_GAP = 64, MIN_SQUEEZE = 0.55;
  var measure = document.createElement("canvas").getContext("2d");
  var MARKS = {only: " mark-only", changed: " mark-changed"};  // a node's mark (graph.marks) as its class

  function el(tag, attrs, parent, text) {
    var node = document.createElementNS(NS, tag);
    Object.keys(attrs).forEach(function (key) { node.setAttribute(key, attrs[key]); });
    if (text !== undefined) { node.textContent = text; }
    if (parent) { parent.appendChild(node); }
    return node;
  }

  // A token as its label shows it: whitespace-only tokens as visible marks
  function tokenText(token) {
    if (token === "" || /\S/.test(token)) { return token; }
    return token.replace(/ /g, "\u2423").replace(/\n/g, "\u21b5").replace(/\t/g, "\u21e5");
  }

  function textWidth(text, size) {
    if (!measure) { return text.length * size * 0.6; }
    measure.font = size + "px system-ui, sans-serif";
    return measure.measureText(text).width;
  }

  function rowOf(node, layers) {
    if (node.kind === "token") { return 0; }
    if (node.kind === "logit") { return layers + 1; }
    return node.layer + 1;
  }

  // A cell's nodes left to right: logits by probability, features by influence rank (most influential first),
  // the error node last.
  function order(graph, a, b) {
    var x = graph.nodes[a], y = graph.nodes[b];
    if (x.kind === "logit") { return (y.prob || 0) - (x.prob || 0); }
    if ((x.kind === "error") !== (y.kind === "error")) { return x.kind === "error" ? 1 : -1; }
    var ix = x.influence === null || x.influence === undefined ? 2 : x.influence;
    var iy = y.influence === null || y.influence === undefined ? 2 : y.influence;
    return ix - iy || a - b;
  }

  // Each column's width: its token label's, or its most crowded cell's, squeezed (down to MIN_SQUEEZE of the
  // node spacing) before the graph grows wider than `room` and scrolls.
  function columnWidths(label, crowd, room) {
    var widths = function (squeeze) {
      return label.map(function (w, p) { return Math.max(w, crowd[p] * squeeze); });
    };
    var sum = function (squeeze) { return widths(squeeze).reduce(function (a, b) { return a + b; }, 0); };
    var low = MIN_SQUEEZE, high = 1;
    if (sum(1) <= room) { return widths(1); }
    if (sum(low) >= room) { return widths(low); }
    for (var k = 0; k < 24; k++) {
      var mid = (low + high) / 2;
      if (sum(mid) > room) { high = mid; } else { low = mid; }
    }
    return widths(low);
  }

  // Where each shown node goes in a `width` x `height` box (grown when the graph needs more room).
  function layout(graph, shown, width, height) {
    var layers = graph.layers, rows = layers + 2, npos = graph.prompt.length;
    graph.nodes.forEach(function (node) { npos = Math.max(npos, node.pos + 1); });
    var cells = {}, label = [], crowd = new Float64Array(npos);
    graph.nodes.forEach(function (node, i) {
      if (!shown[i]) { return; }
      var key = rowOf(node, layers) * npos + node.pos;
      (cells[key] = cells[key] || []).push(i);
    });
    for (var p = 0; p < npos; p++) {
      var token = p < graph.prompt.length ? tokenText(graph.prompt[p]) : String(p);
      label.push(Math.max(44, textWidth(token, 13) + 14));
    }
    Object.keys(cells).forEach(function (key) {
      var pos = Number(key) % npos;
      crowd[pos] = Math.max(crowd[pos], cells[key].length * STEP + 14);
    });
    var room = Math.max(width - LEFT - RIGHT, 1), need = columnWidths(label, crowd, room);
    var total = need.reduce(function (a, b) { return a + b; }, 0);
    var extra = total < room ? (room - total) / npos : 0;
    var gap = Math.max(MIN_GAP, (height - TOP - BOTTOM) / Math.max(rows - 1, 1));
    var out = {width: Math.max(width, LEFT + RIGHT + total), height: TOP + BOTTOM + gap * (rows - 1),
               x: new Float64Array(graph.nodes.length), y: new Float64Array(graph.nodes.length),
               below: new Uint8Array(graph.nodes.length), size: new Float64Array(graph.nodes.length).fill(1),
               rows: [], columns: []};
    var rowY = function (row) { return out.height - BOTTOM - row * gap; };
    for (var r = 0; r < rows; r++) {
      out.rows.push({y: rowY(r), label: r === 0 ? "tokens" : r === rows - 1 ? "logits" : "layer " + (r - 1)});
    }
    var left = LEFT, centers = [];
    need.forEach(function (w, pos) {
      var colW = w + extra;  // the room to spare shared equally: crowded columns stay wider, none is starved
      centers.push(left + colW / 2);
      out.columns.push({x: left + colW / 2, width: colW,
                        token: pos < graph.prompt.length ? graph.prompt[pos] : String(pos)});
      left += colW;
    });
    Object.keys(cells).forEach(function (key) {
      var members = cells[key].sort(function (a, b) { return order(graph, a, b); });
      var row = Math.floor(Number(key) / npos), pos = Number(key) % npos;
      var step = Math.min(MAX_STEP, (out.columns[pos].width - 12) / members.length);
      var start = centers[pos] - step * (members.length - 1) / 2;
      members.forEach(function (i, k) {
        out.x[i] = start + k * step;
        out.y[i] = rowY(row);
        out.below[i] = step < 26 && k % 2 === 1 ? 1 : 0;
        out.size[i] = Math.min(1, step / 20);  // squeezed cells draw smaller nodes, side by side
      });
    });
    return out;
  }

  function shape(node, parent) {
    if (node.kind === "error") { return el("rect", {"class": "shape", x: -6, y: -6, width: 12, height: 12}, parent); }
    if (node.kind === "token" || node.kind === "logit") {
      return el("rect", {"class": "shape", x: -9, y: -7, width: 18, height: 14, rx: 3}, parent);
    }
    return el("circle", {"class": "shape", r: 7}, parent);
  }

  function nodeGroup(graph, i, x, y, below, size, parent) {
    var node = graph.nodes[i];
    var card = node.card && graph.cards[node.card];
    var mark = MARKS[((graph.marks || {})[node.id] || {}).mark] || "";  // side by side: only here, or changed
    var g = el("g", {"class": "node " + node.kind + (card ? " linked" : "") + mark, "data-node": node.id, tabindex: 0,
                     transform: "translate(" + x.toFixed(1) + " " + y.toFixed(1) + ")" +
                       (size < 1 ? " scale(" + size.toFixed(2) + ")" : ""),
                     role: "button", "aria-label": node.kind + " " + node.label}, parent);
    var top = node.short && !below ? -23 : -10, bottom = node.short && below ? 25 : 10;
    el("rect", {"class": "hit", x: -11, y: top, width: 22, height: bottom - top, fill: "transparent"}, g);
    if (mark) { el("circle", {"class": "ring", r: 12.5}, g); }
    shape(node, g);
    if (node.short) {
      el("text", {y: below ? 20 : -12, "class": "short halo", "text-anchor": "middle"}, g, node.short);
    }
    return g;
  }

  function linkWidth(weight, biggest) { return 0.4 + 4 * Math.sqrt(Math.abs(weight) / biggest); }

  // The pruned graph drawn into `svg`; {groups: node index -> its <g>, linksOf: node index -> its <line>s}
  function draw(svg, graph, shown, width, height) {
    var at = layout(graph, shown.nodes, width, height);
    svg.replaceChildren();
    svg.setAttribute("viewBox", "0 0 " + at.width.toFixed(0) + " " + at.height.toFixed(0));
    svg.setAttribute("width", at.width.toFixed(0));
    svg.setAttribute("height", at.height.toFixed(0));
    at.rows.forEach(function (row) {
      el("line", {"class": "row", x1: LEFT - 4, x2: at.width - RIGHT, y1: row.y, y2: row.y}, svg);
      el("text", {"class": "row-label", x: 4, y: row.y + 4}, svg, row.label);
    });
    at.columns.forEach(function (column) {
      el("text", {"class": "token-label", x: column.x.toFixed(1), y: (at.rows[0].y + 30).toFixed(1),
                  "font-size": 13, "text-anchor": "middle", "data-token": column.token}, svg, tokenText(column.token));
    });
    var biggest = 1e-30, linksOf = {}, groups = {};
    shown.links.forEach(function (li) { biggest = Math.max(biggest, Math.abs(graph.links[li][2])); });
    var drawn = shown.links.slice().sort(function (a, b) {
      return Math.abs(graph.links[a][2]) - Math.abs(graph.links[b][2]);
    });
    var linkLayer = el("g", {"class": "links"}, svg), nodeLayer = el("g", {"class": "nodes"}, svg);
    drawn.forEach(function (li) {
      var l = graph.links[li];
      var line = el("line", {"class": "link", x1: at.x[l[0]].toFixed(1), y1: at.y[l[0]].toFixed(1),
                             x2: at.x[l[1]].toFixed(1), y2: at.y[l[1]].toFixed(1),
                             stroke: l[2] >= 0 ? "#2166ac" : "#b2182b",
                             "stroke-width": linkWidth(l[2], biggest).toFixed(2)}, linkLayer);
      (linksOf[l[0]] = linksOf[l[0]] || []).push(line);
      (linksOf[l[1]] = linksOf[l[1]] || []).push(line);
    });
    graph.nodes.forEach(function (node, i) {
      if (shown.nodes[i]) { groups[i] = nodeGroup(graph, i, at.x[i], at.y[i], at.below[i], at.size[i], nodeLayer); }
    });
    return {groups: groups, linksOf: linksOf};
  }

  // The pinned nodes and the file's links between them, in a `width` wide box; node index -> its <g>
  function subgraph(svg, graph, pinned, width) {
    svg.replaceChildren();
    var rows = {}, groups = {}, keys;
    pinned.forEach(function (i) {
      var row = rowOf(graph.nodes[i], graph.layers);
      (rows[row] = rows[row] || []).push(i);
    });
    keys = Object.keys(rows).map(Number).sort(function (a, b) { return b - a; });
    var gap = 58, height = Math.max(keys.length, 1) * gap + 6, x = {}, y = {};
    keys.forEach(function (row, r) {
      var members = rows[row].sort(function (a, b) {
        return graph.nodes[a].pos - graph.nodes[b].pos || order(graph, a, b);
      });
      el("text", {"class": "row-label", x: 2, y: r * gap + 36}, svg,
         row === 0 ? "tokens" : row === graph.layers + 1 ? "logits" : "layer " + (row - 1));
      members.forEach(function (i, k) {
        x[i] = LEFT + (k + 0.5) * (width - LEFT - 8) / members.length;
        y[i] = r * gap + 32;
      });
    });
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
    var pinnedSet = {};
    pinned.forEach(function (i) { pinnedSet[i] = true; });
    var within = graph.links.filter(function (l) { return pinnedSet[l[0]] && pinnedSet[l[1]]; });
    var biggest = 1e-30;
    within.forEach(function (l) { biggest = Math.max(biggest, Math.abs(l[2])); });
    within.forEach(function (l) {
      el("line", {"class": "link", x1: x[l[0]], y1: y[l[0]], x2: x[l[1]], y2: y[l[1]],
                  stroke: l[2] >= 0 ? "#2166ac" : "#b2182b", "stroke-width": linkWidth(l[2], biggest).toFixed(2)},
         svg);
    });
    pinned.forEach(function (i) {
      var node = graph.nodes[i];
      groups[i] = nodeGroup(graph, i, x[i], y[i], false, 1, svg);
      if (node.kind !== "logit" && node.kind !== "token") {  // where a feature or error node sits in the prompt
        var token = node.pos < graph.prompt.length ? tokenText(graph.prompt[node.pos]) : String(node.pos);
        el("text", {"class": "pos-label halo", y: 21, "text-anchor": "middle"}, groups[i], token);
      }
    });
    return {groups: groups, links: within.length};
  }

  return {draw: draw, subgraph: subgraph, tokenText: tokenText, rowOf: rowOf};
})();
