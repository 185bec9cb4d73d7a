// lenscope ui: the attribution graph page: thresholds that prune the graph again (graph_prune.js), the graph drawn
// to fill the page (graph_draw.js), nodes pinned into a subgraph kept in the URL, and a card for the hovered node.
"use strict";

(function () {
  var thresholds = {node: 1, edge: 1}, panes = [], pending = false;

  function fmt(value) {
    if (value === null || value === undefined) { return "–"; }
    return Math.abs(value) >= 1e4 || (value !== 0 && Math.abs(value) < 1e-3) ? value.toExponential(3)
      : String(Number(value.toPrecision(4)));
  }

  function signed(value) { return (value > 0 ? "+" : "") + fmt(value); }

  // Side by side: where a node stands in the other graph (its mark from the comparison, graph_marks.py)
  function across(mark) {
    if (mark.mark === "only") { return "not in it: only in this graph of the two"; }
    var values = mark.here === null || mark.here === undefined ? "" : ": influence share (a logit: probability) " +
      fmt(mark.here) + " here, " + fmt(mark.there) + " there";
    return (mark.mark === "changed" ? "in it too, changed" : "in it too") + values;
  }

  function add(parent, tag, text, className) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) { node.textContent = text; }
    if (className) { node.className = className; }
    parent.appendChild(node);
    return node;
  }

  function fraction(text) {
    var value = Number(text);
    return text !== null && text !== "" && isFinite(value) && value >= 0 && value <= 1 ? value : 1;
  }

  function writeUrl() {
    var url = new URL(window.location.href);
    [["node_threshold", thresholds.node], ["edge_threshold", thresholds.edge]].forEach(function (pair) {
      if (pair[1] < 1) { url.searchParams.set(pair[0], String(pair[1])); } else { url.searchParams.delete(pair[0]); }
    });
    panes.forEach(function (pane) {
      var ids = pane.pinned.map(function (i) { return pane.graph.nodes[i].id; });
      if (ids.length) { url.searchParams.set(pane.param, ids.join(",")); } else { url.searchParams.delete(pane.param); }
    });
    window.history.replaceState(null, "", url.toString());
  }

  function Pane(section) {
    this.section = section;
    this.graph = JSON.parse(document.getElementById(section.dataset.data).textContent);
    this.param = section.dataset.pinParam;
    this.canvas = section.querySelector(".graph-canvas");
    this.svg = section.querySelector("svg.graph");
    this.sub = section.querySelector("svg.subgraph");
    this.card = section.querySelector(".graph-card");
    this.byId = {};
    this.graph.nodes.forEach(function (node, i) { this.byId[node.id] = i; }, this);
    var wanted = new URL(window.location.href).searchParams.get(this.param) || "";
    this.pinned = wanted.split(",").filter(function (id) { return id in this.byId; }, this)
      .map(function (id) { return this.byId[id]; }, this)
      .filter(function (i, k, all) { return all.indexOf(i) === k; });
    this.selected = this.pinned.length ? this.pinned[this.pinned.length - 1] : null;  // the card of the last pin
    this.bind(this.svg, true);
    this.bind(this.sub, false);
  }

  Pane.prototype.indexOf = function (target) {
    var group = target && target.closest ? target.closest("g.node") : null;
    return group && group.dataset.node in this.byId ? this.byId[group.dataset.node] : null;
  };

  Pane.prototype.bind = function (svg, pins) {
    var pane = this;
    svg.addEventListener("mouseover", function (event) {
      var i = pane.indexOf(event.target);
      if (i !== null) { pane.focus(i); }
    });
    svg.addEventListener("mouseout", function (event) {
      if (pane.indexOf(event.target) !== null && pane.indexOf(event.relatedTarget) === null) { pane.focus(null); }
    });
    svg.addEventListener("focusin", function (event) {
      var i = pane.indexOf(event.target);
      if (i !== null) { pane.focus(i); }
    });
    if (!pins) { return; }
    svg.addEventListener("click", function (event) {
      var i = pane.indexOf(event.target);
      if (i !== null) { pane.toggle(i); }
    });
    svg.addEventListener("keydown", function (event) {
      var i = pane.indexOf(event.target);
      if (i !== null && (event.key === "Enter" || event.key === " ")) { event.preventDefault(); pane.toggle(i); }
    });
  };

  Pane.prototype.prune = function () {
    var note = this.section.querySelector(".graph-note");
    note.textContent = "";
    try {
      this.result = GraphPrune.prune(this.graph, thresholds.node, thresholds.edge);
    } catch (error) {  // a file with a cycle cannot be pruned again: it is drawn as saved
      note.textContent = "not pruned again (" + error.message + "): drawn as saved";
      this.result = {nodes: new Uint8Array(this.graph.nodes.length).fill(1), influence: null,
                     links: this.graph.links.map(function (l, i) { return i; })};
    }
    var shown = this.result.nodes.reduce(function (a, b) { return a + b; }, 0);
    this.section.querySelector(".counts").textContent = shown + " of " + this.graph.nodes.length + " nodes · " +
      this.result.links.length + " of " + this.graph.links.length + " links shown";
  };

  Pane.prototype.render = function () {
    var rect = this.canvas.getBoundingClientRect();
    var height = Math.max(360, window.innerHeight - (rect.top + window.scrollY) - 14);
    this.svg.classList.remove("focus");
    this.drawn = GraphDraw.draw(this.svg, this.graph, this.result, this.canvas.clientWidth, height);
    this.renderPins();
  };

  Pane.prototype.toggle = function (i) {
    var at = this.pinned.indexOf(i);
    if (at >= 0) { this.pinned.splice(at, 1); } else { this.pinned.push(i); }
    this.selected = i;
    this.renderPins();
    this.showCard(i);
    writeUrl();
  };

  Pane.prototype.renderPins = function () {
    var pane = this, list = this.section.querySelector(".pin-list");
    Object.keys(this.drawn.groups).forEach(function (i) {
      pane.drawn.groups[i].classList.toggle("pinned", pane.pinned.indexOf(Number(i)) >= 0);
    });
    this.section.querySelector(".pins").hidden = !this.pinned.length;
    this.section.querySelector(".pin-hint").hidden = this.pinned.length > 0;
    var width = Math.max(this.sub.parentNode.clientWidth - 4, 200);
    var sub = GraphDraw.subgraph(this.sub, this.graph, this.pinned, width);
    this.section.querySelector(".pin-count").textContent = this.pinned.length + " pinned · " + sub.links +
      " links between them";
    list.replaceChildren();
    this.pinned.forEach(function (i) {
      var node = pane.graph.nodes[i], item = add(list, "li");
      var button = add(item, "button", "×", "small unpin");
      button.type = "button";
      button.title = "unpin";
      button.addEventListener("click", function () { pane.toggle(i); });
      add(item, "span", " " + pane.title(i) + " ");
      if (node.activation !== null && node.activation !== undefined) {
        add(item, "span", "activation " + fmt(node.activation) + " ", "muted");
      }
      pane.dashboardLink(item, node);
    });
  };

  Pane.prototype.title = function (i) {
    var node = this.graph.nodes[i];
    var token = node.pos < this.graph.prompt.length ? GraphDraw.tokenText(this.graph.prompt[node.pos]) : "";
    var where = node.kind === "token" ? "" : (node.layer !== undefined ? " L" + node.layer : "") + " @" + node.pos +
      (token ? " “" + token + "”" : "");
    if (node.kind === "feature") { return "feature #" + node.short + where; }
    if (node.kind === "logit") { return "logit “" + node.short + "”"; }
    if (node.kind === "token") { return "token “" + token + "” @" + node.pos; }
    return "error" + where;
  };

  Pane.prototype.dashboardLink = function (parent, node) {
    var card = node.card && this.graph.cards[node.card];
    if (card && card.href) {
      var link = add(parent, "a", "its dashboard", "dashboard");
      link.href = card.href;
    } else if (node.kind === "feature" && this.graph.scan_is_node) {
      add(parent, "span", "no dashboard page (its dictionary job keeps those of its most active latents)", "muted");
    }
  };

  Pane.prototype.focus = function (i) {
    var links = this.svg.querySelectorAll("line.hot");
    Array.prototype.forEach.call(links, function (line) { line.classList.remove("hot"); });
    this.svg.classList.toggle("focus", i !== null && !!this.drawn.groups[i]);
    if (i !== null && this.drawn.linksOf[i]) {
      this.drawn.linksOf[i].forEach(function (line) { line.classList.add("hot"); });
    }
    if (i !== null) { this.selected = i; this.showCard(i); }  // the card stays when the pointer leaves the node
  };

  Pane.prototype.logitEffects = function (i) {
    var graph = this.graph;
    return graph.links.filter(function (l) { return l[0] === i && graph.nodes[l[1]].kind === "logit"; })
      .sort(function (a, b) { return b[2] - a[2]; }).slice(0, 5)
      .map(function (l) { return [graph.nodes[l[1]].short, l[2]]; });
  };

  Pane.prototype.showCard = function (i) {
    var box = this.card, node = i === null ? null : this.graph.nodes[i];
    box.replaceChildren();
    if (!node) { add(box, "p", "Hover a node for its details; click it to pin it.", "muted"); return; }
    box.dataset.node = node.id;
    add(box, "h3", this.title(i));
    if (node.label !== node.id) { add(box, "p", node.label, "clerp"); }
    var facts = add(box, "dl", null, "facts-list");
    var fact = function (name, value, className) {
      add(facts, "dt", name);
      add(facts, "dd", value, className);
    };
    if (node.kind === "feature") { fact("activation", fmt(node.activation), "activation"); }
    if (node.kind === "logit") { fact("probability", fmt(node.prob)); }
    if (node.influence !== null && node.influence !== undefined) {
      fact("rank", fmt(node.influence) + " (the file's cumulative influence up to this node: smaller ranks first)");
    }
    var inf = this.result && this.result.influence;
    if (inf && node.kind !== "logit") {
      var total = inf.reduce(function (a, b) { return a + b; }, 0);
      fact("share", (100 * inf[i] / Math.max(total, 1e-30)).toFixed(1) + "% of the influence on the logits " +
           "(over this file's links)");
    }
    var mark = (this.graph.marks || {})[node.id];
    if (mark) { fact("the other graph", across(mark), "across"); }
    var card = node.card && this.graph.cards[node.card];
    this.logits(box, "top logits it pushes (its dashboard)", card ? card.top_logits : []);
    this.logits(box, "and pulls down", card ? card.bottom_logits : []);
    this.logits(box, "direct effect on this graph's logits", this.logitEffects(i));
    if (card && card.contexts.length) {
      add(box, "h4", "top contexts (its dashboard)");
      var list = add(box, "ol", null, "contexts ctx");
      card.contexts.forEach(function (c) {
        var item = add(list, "li");
        add(item, "span", c.before ? c.before + " " : "");
        add(item, "mark", c.token, "act");
        add(item, "span", c.after ? " " + c.after : "");
        add(item, "span", " " + fmt(c.activation), "muted");
      });
    }
    this.dashboardLink(add(box, "p"), node);
  };

  Pane.prototype.logits = function (box, heading, pairs) {
    if (!pairs || !pairs.length) { return; }
    add(box, "h4", heading);
    var list = add(box, "p", null, "logit-list");
    pairs.forEach(function (pair) { add(list, "span", "“" + pair[0] + "” " + signed(pair[1]), "tag"); });
  };

  function update() {
    pending = false;
    panes.forEach(function (pane) { pane.prune(); });  // every header settled before any canvas is measured
    panes.forEach(function (pane) { pane.render(); pane.showCard(pane.selected); });
  }

  function schedule() {
    if (!pending) { pending = true; window.requestAnimationFrame(update); }
  }

  function initControls() {
    var query = new URL(window.location.href).searchParams;
    [["node", "node_threshold"], ["edge", "edge_threshold"]].forEach(function (pair) {
      var slider = document.getElementById(pair[1]), output = document.querySelector("output[for=" + pair[1] + "]");
      thresholds[pair[0]] = fraction(query.get(pair[1]));
      slider.value = String(thresholds[pair[0]]);
      output.textContent = thresholds[pair[0]].toFixed(3);
      slider.addEventListener("input", function () {
        thresholds[pair[0]] = Number(slider.value);
        output.textContent = thresholds[pair[0]].toFixed(3);
        schedule();
      });
      slider.addEventListener("change", writeUrl);  // once the slider is let go: browsers throttle history writes
    });
    var clear = document.getElementById("clear-pins");
    clear.addEventListener("click", function () {
      panes.forEach(function (pane) { pane.pinned = []; pane.renderPins(); });
      writeUrl();
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var sections = document.querySelectorAll(".graph-pane");
    if (!sections.length) { return; }
    initControls();
    panes = Array.prototype.map.call(sections, function (section) { return new Pane(section); });
    update();
    window.addEventListener("resize", schedule);
  });
})();
