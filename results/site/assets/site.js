// benchbench results: sortable and filterable tables. The pages read fully without this script;
// it only adds sort buttons to column headings and shows the filter boxes.
"use strict";

(function () {
  function sortKey(cell) {
    var key = cell.getAttribute("data-sort");
    return key === null ? cell.textContent.trim() : key;
  }

  function compareKeys(a, b) {
    var x = Number(a), y = Number(b);
    if (!isNaN(x) && !isNaN(y)) return x - y;
    return a.localeCompare(b, undefined, {numeric: true, sensitivity: "base"});
  }

  function sortBy(table, column, th) {
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    table.querySelectorAll("thead th").forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows).map(function (row, index) {
      return {row: row, key: sortKey(row.cells[column]), index: index};
    });
    rows.sort(function (a, b) {
      // Missing values ("") go last whichever way the column is sorted; ties keep their order.
      if (a.key === "" || b.key === "") return (a.key === "") - (b.key === "") || a.index - b.index;
      var order = compareKeys(a.key, b.key);
      return (ascending ? order : -order) || a.index - b.index;
    });
    rows.forEach(function (r) { body.appendChild(r.row); });
  }

  function makeSortable(table) {
    table.querySelectorAll("thead th").forEach(function (th, column) {
      var button = document.createElement("button");
      button.type = "button";
      button.className = "sort";
      button.title = "Sort by this column";
      while (th.firstChild) button.appendChild(th.firstChild);
      th.appendChild(button);
      button.addEventListener("click", function () { sortBy(table, column, th); });
    });
  }

  function makeFilter(box) {
    var table = document.getElementById(box.getAttribute("data-table"));
    if (!table) return;
    var text = box.querySelector("[data-filter-text]");
    var select = box.querySelector("[data-filter-column]");
    var flagged = box.querySelector("[data-filter-flagged]");
    var status = box.querySelector(".filter-status");
    function apply() {
      var terms = text.value.toLowerCase().split(/\s+/).filter(Boolean);
      var column = select ? Number(select.getAttribute("data-filter-column")) : -1;
      var wanted = select ? select.value : "";
      var rows = table.tBodies[0].rows, shown = 0;
      for (var i = 0; i < rows.length; i++) {
        var content = rows[i].textContent.toLowerCase();
        var ok = terms.every(function (t) { return content.indexOf(t) !== -1; }) &&
                 (!wanted || rows[i].cells[column].textContent.trim() === wanted) &&
                 (!flagged || !flagged.checked || rows[i].classList.contains("flagged"));
        rows[i].hidden = !ok;
        if (ok) shown++;
      }
      var total = rows.length + (rows.length === 1 ? " row" : " rows");
      status.textContent = shown === rows.length ? total : "showing " + shown + " of " + total;
      markWide();
    }
    text.addEventListener("input", apply);
    if (select) select.addEventListener("change", apply);
    if (flagged) flagged.addEventListener("change", apply);
    box.hidden = false;
    apply();
  }

  // A table wider than its box (more columns than the window holds, their text wrapped) scrolls
  // inside a box no taller than the window, its headings kept in view: its sideways scrollbar is
  // then on screen with it, never below a long table's last row.
  function markWide() {
    document.querySelectorAll(".scroll").forEach(function (box) {
      box.classList.toggle("wide", box.scrollWidth > box.clientWidth + 1);
    });
  }

  // A link to a cell's details (#cell-3) opens them.
  function openTarget() {
    var target = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (target && target.tagName === "DETAILS") target.open = true;
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("table.sortable").forEach(makeSortable);
    document.querySelectorAll(".filter[data-table]").forEach(makeFilter);
    openTarget();
    markWide();
    window.addEventListener("hashchange", openTarget);
    window.addEventListener("resize", markWide);
  });
})();
