// fx2onnx site: sorting and filtering of result tables, shipped with the site (no CDN).
// A table with the class fx-sortable sorts on a click on a header cell; one with the class
// fx-filterable gets a search box and a "failures only" switch (rows holding a ✘).
// The execution-time tables of sphinx-gallery (sg-datatable) are sortable too.
(function () {
  "use strict";

  // column index of every header cell over one column reaching the last header row
  // (the sortable ones), colspans and rowspans included
  function headerColumns(thead) {
    const taken = [];
    const result = [];
    Array.from(thead.rows).forEach(function (row, r) {
      taken[r] = taken[r] || [];
      let col = 0;
      Array.from(row.cells).forEach(function (cell) {
        while (taken[r][col]) col += 1;
        for (let dr = 0; dr < cell.rowSpan; dr++) {
          taken[r + dr] = taken[r + dr] || [];
          for (let dc = 0; dc < cell.colSpan; dc++) taken[r + dr][col + dc] = true;
        }
        if (cell.colSpan === 1 && r + cell.rowSpan === thead.rows.length) result.push([cell, col]);
        col += cell.colSpan;
      });
    });
    return result;
  }

  function cellKey(row, col) {
    const cell = row.cells[col];
    if (!cell) return "";
    const text = cell.textContent.trim();
    // ✔ before ✘ before not applicable / not run
    if (text.startsWith("\u2714")) return "0 " + text;
    if (text.startsWith("\u2718")) return "1 " + text;
    if (text === "-" || text === "\u2013") return "2";
    return text;
  }

  const collator = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" });

  function makeSortable(table) {
    const thead = table.tHead;
    const body = table.tBodies[0];
    if (!thead || !body) return;
    const columns = headerColumns(thead);
    columns.forEach(function ([cell, col]) {
      cell.dataset.sort = "none";
      cell.title = "sort by this column";
      cell.addEventListener("click", function () {
        const ascending = cell.dataset.sort !== "ascending";
        columns.forEach(function ([other]) { other.dataset.sort = "none"; });
        cell.dataset.sort = ascending ? "ascending" : "descending";
        const rows = Array.from(body.rows);
        rows.sort(function (a, b) {
          const c = collator.compare(cellKey(a, col), cellKey(b, col));
          return ascending ? c : -c;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  }

  function makeFilterable(table) {
    const body = table.tBodies[0];
    if (!body) return;
    const bar = document.createElement("div");
    bar.className = "fx-table-filter";
    const search = document.createElement("input");
    search.type = "search";
    search.placeholder = "filter rows (a name, a step, an exporter...)";
    search.setAttribute("aria-label", "filter the rows of the table");
    const label = document.createElement("label");
    const failures = document.createElement("input");
    failures.type = "checkbox";
    label.appendChild(failures);
    label.appendChild(document.createTextNode(" failures only"));
    const count = document.createElement("span");
    count.className = "fx-count";
    bar.appendChild(search);
    bar.appendChild(label);
    bar.appendChild(count);
    const anchor = table.closest(".table-wrapper") || table;
    anchor.parentNode.insertBefore(bar, anchor);

    function update() {
      const words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
      let shown = 0;
      Array.from(body.rows).forEach(function (row) {
        const text = row.textContent.toLowerCase();
        const ok = words.every(function (w) { return text.includes(w); }) &&
          (!failures.checked || text.includes("\u2718"));
        row.hidden = !ok;
        if (ok) shown += 1;
      });
      count.textContent = shown + " / " + body.rows.length + " rows";
    }
    search.addEventListener("input", update);
    failures.addEventListener("change", update);
    update();
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("table.fx-sortable, table.sg-datatable").forEach(makeSortable);
    document.querySelectorAll("table.fx-filterable").forEach(makeFilterable);
  });
})();
