// Draws the figures of a page: plain JSON in <script type="application/json" id="plot-data">, read with
// JSON.parse (never evaluated), plotted with the plotly.js copied next to this file.
(function () {
  "use strict";
  var holder = document.getElementById("plot-data");
  if (!holder || typeof Plotly === "undefined") { return; }
  var figures = JSON.parse(holder.textContent);
  var config = { displaylogo: false, responsive: true, typesetMath: false };
  figures.forEach(function (figure) {
    var element = document.getElementById(figure.id);
    if (element) { Plotly.newPlot(element, figure.data, figure.layout, config); }
  });
})();
