// Icon buttons: an icon from Lucide (icons.css) with an accessible name and a tooltip, so a page reads
// the same on a machine without an emoji font and to a screen reader.
export function icon(name) {
  const el = document.createElement("span");
  el.className = "i i-" + name;
  el.setAttribute("aria-hidden", "true");
  return el;
}

// A button showing `iconName` (and `text`, when given, beside it); `label` names it and is its tooltip.
export function iconButton(className, iconName, label, onClick, text) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = className;
  b.title = label;
  b.setAttribute("aria-label", label);
  b.append(icon(iconName));
  if (text) b.append(" " + text);
  if (onClick) b.addEventListener("click", onClick);
  return b;
}
