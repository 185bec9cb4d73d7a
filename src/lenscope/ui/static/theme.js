// Dark or light before the first paint: the reader's stored choice, else the system's.
(function () {
  var stored = null;
  try { stored = window.localStorage.getItem("lenscope-theme"); } catch (e) { stored = null; }
  if (stored === "dark" || stored === "light") { document.documentElement.dataset.theme = stored; }
})();
