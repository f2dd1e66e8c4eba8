// Times arrive in UTC; show each in the viewer's own zone and language. The "as of" field
// is typed in local time and sent as an exact moment with its offset.
"use strict";

function localTimes() {
  const lang = document.body.dataset.lang === "zh" ? "zh-CN" : "en-GB";
  const format = new Intl.DateTimeFormat(lang, {
    year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short",
  });
  for (const el of document.querySelectorAll("time[datetime]")) {
    const moment = new Date(el.getAttribute("datetime"));
    if (!Number.isNaN(moment.getTime())) {
      // The zone last, in either language: "2026/11/01 17:00:00 GMT+8".
      const parts = format.formatToParts(moment);
      const zone = parts.find((p) => p.type === "timeZoneName");
      const rest = parts.filter((p) => p.type !== "timeZoneName").map((p) => p.value);
      el.title = el.textContent;
      el.textContent = `${rest.join("").trim()} ${zone ? zone.value : ""}`.trim();
    }
  }
}

function pad(n) { return String(n).padStart(2, "0"); }

function localInputValue(moment) {
  return `${moment.getFullYear()}-${pad(moment.getMonth() + 1)}-${pad(moment.getDate())}` +
    `T${pad(moment.getHours())}:${pad(moment.getMinutes())}:${pad(moment.getSeconds())}`;
}

function localTimeForms() {
  for (const form of document.querySelectorAll("form[data-local-time]")) {
    for (const input of form.querySelectorAll("input[data-for]")) {
      const hidden = form.querySelector(`input[name="${input.dataset.for}"]`);
      if (hidden.value) { input.value = localInputValue(new Date(hidden.value)); }
      hidden.disabled = !hidden.value;
    }
    form.addEventListener("submit", () => {
      for (const input of form.querySelectorAll("input[data-for]")) {
        const hidden = form.querySelector(`input[name="${input.dataset.for}"]`);
        hidden.value = input.value ? new Date(input.value).toISOString() : "";
        hidden.disabled = !hidden.value;
      }
    });
  }
}

document.addEventListener("DOMContentLoaded", () => { localTimes(); localTimeForms(); });
