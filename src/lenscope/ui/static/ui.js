// lenscope ui: flip-book sliders, chart read-outs, forms that apply themselves, and live refresh.
"use strict";

function initThemeButton() {
  var button = document.getElementById("theme");
  if (!button) { return; }
  button.addEventListener("click", function () {
    var dark = window.matchMedia("(prefers-color-scheme: dark)").matches;
    var now = document.documentElement.dataset.theme || (dark ? "dark" : "light");
    var next = now === "dark" ? "light" : "dark";
    document.documentElement.dataset.theme = next;
    try { window.localStorage.setItem("lenscope-theme", next); } catch (e) { /* private mode */ }
  });
}

function showFrame(book, index) {
  var steps = book.querySelectorAll(".steps li");
  if (!steps[index]) { return; }
  book.querySelector(".frame-label").textContent = "step " + steps[index].textContent;
  book.querySelectorAll(".pane").forEach(function (pane) {  // one slider moves every run's pane to the same step
    var frames = pane.querySelectorAll(".frames li");
    var frame = frames[index];
    var img = pane.querySelector("img.figure");
    var label = pane.querySelector(".pane-step");
    if (!frame || !frame.dataset.src) {
      img.hidden = true;
      if (label) { label.textContent = "no figure yet"; }
      return;
    }
    img.hidden = false;
    img.src = frame.dataset.src;
    img.alt = book.dataset.name + " at step " + frame.dataset.seq;
    pane.querySelector(".frame-link").href = frame.dataset.node;
    if (label) { label.textContent = "step " + frame.dataset.seq; }
    [index - 1, index + 1].forEach(function (near) {  // the next pictures are ready before the slider gets there
      if (frames[near] && frames[near].dataset.src) { (new Image()).src = frames[near].dataset.src; }
    });
  });
}

function initFlipbooks(root, positions) {
  root.querySelectorAll(".flipbook").forEach(function (book) {
    var slider = book.querySelector(".slider");
    var last = Number(slider.max);
    var kept = positions && positions[book.dataset.name];
    if (kept && !kept.atEnd && kept.index <= last) {
      slider.value = String(kept.index);
      showFrame(book, kept.index);
    }
    slider.addEventListener("input", function () { showFrame(book, Number(slider.value)); });
  });
}

function flipbookPositions() {
  var out = {};
  document.querySelectorAll(".flipbook").forEach(function (book) {
    var slider = book.querySelector(".slider");
    out[book.dataset.name] = {index: Number(slider.value), atEnd: slider.value === slider.max};
  });
  return out;
}

function nearest(xs, x) {
  var lo = 0, hi = xs.length - 1;
  while (hi - lo > 1) {
    var mid = (lo + hi) >> 1;
    if (xs[mid] < x) { lo = mid; } else { hi = mid; }
  }
  return Math.abs(xs[lo] - x) <= Math.abs(xs[hi] - x) ? lo : hi;
}

function formatValue(v) {
  if (Number.isInteger(v)) { return String(v); }
  return Number(v.toPrecision(6)).toString();
}

function initCharts(root) {
  root.querySelectorAll("figure.chart").forEach(function (figure) {
    var svg = figure.querySelector("svg");
    if (!svg) { return; }
    var frame = JSON.parse(figure.dataset.frame), box = JSON.parse(figure.dataset.box);
    var readout = figure.querySelector(".readout"), cursor = svg.querySelector(".cursor");
    var lines = Array.prototype.map.call(svg.querySelectorAll("path.line"), function (path) {
      return {label: path.dataset.label, xs: JSON.parse(path.dataset.xs), ys: JSON.parse(path.dataset.ys)};
    });
    svg.addEventListener("mousemove", function (event) {
      var rect = svg.getBoundingClientRect();
      var px = (event.clientX - rect.left) / rect.width * svg.viewBox.baseVal.width;
      var x = frame[0] + (px - box[0]) / (box[2] - box[0]) * (frame[1] - frame[0]);
      var parts = [];
      var at = null;
      lines.forEach(function (line) {
        var i = nearest(line.xs, x);
        at = at === null ? line.xs[i] : at;
        parts.push((lines.length > 1 ? line.label + ": " : "") + formatValue(line.ys[i]) + " @ " + line.xs[i]);
      });
      var cx = box[0] + (at - frame[0]) / (frame[1] - frame[0]) * (box[2] - box[0]);
      cursor.setAttribute("x1", cx);
      cursor.setAttribute("x2", cx);
      readout.textContent = parts.join("   ");
    });
    svg.addEventListener("mouseleave", function () {
      cursor.setAttribute("x1", -10);
      cursor.setAttribute("x2", -10);
      readout.textContent = "";
    });
  });
}

function initForms(root) {
  root.querySelectorAll("form.curve-form, form.filters").forEach(function (form) {
    form.querySelectorAll("input[type=checkbox], select").forEach(function (input) {
      input.addEventListener("change", function () { form.requestSubmit(); });
    });
  });
}

function init(root, positions) {
  initFlipbooks(root, positions);
  initCharts(root);
  initForms(root);
}

function openDetails() {
  return Array.prototype.map.call(document.querySelectorAll("main details"), function (d) { return d.open; });
}

function refresh() {
  var positions = flipbookPositions(), opened = openDetails();
  return fetch(window.location.href, {headers: {"Accept": "text/html"}}).then(function (response) {
    if (!response.ok) { throw new Error("HTTP " + response.status); }
    return response.text();
  }).then(function (html) {
    var page = new DOMParser().parseFromString(html, "text/html");
    var main = document.querySelector("main");
    main.replaceChildren.apply(main, Array.prototype.slice.call(page.querySelector("main").childNodes));
    document.querySelectorAll("main details").forEach(function (d, i) { if (i < opened.length) { d.open = opened[i]; } });
    init(main, positions);
    return page.body.dataset.stamp;
  });
}

function initLive() {
  var body = document.body, url = body.dataset.stampUrl;
  if (!url) { return; }
  var badge = document.getElementById("live"), wait = 3000;
  badge.hidden = false;
  function poll() {
    if (document.hidden) { window.setTimeout(poll, wait); return; }
    fetch(url, {cache: "no-store"}).then(function (response) { return response.json(); }).then(function (data) {
      if (data.stamp === body.dataset.stamp) { return null; }
      return refresh().then(function (stamp) { body.dataset.stamp = stamp || data.stamp; });
    }).then(function () {
      badge.classList.remove("lost");
      wait = 3000;
    }, function () {
      badge.classList.add("lost");  // the server went away: keep trying, less often
      wait = Math.min(wait * 2, 30000);
    }).then(function () { window.setTimeout(poll, wait); });
  }
  window.setTimeout(poll, wait);
}

document.addEventListener("DOMContentLoaded", function () {
  initThemeButton();
  init(document, null);
  initLive();
});
